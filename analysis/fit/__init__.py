"""β and its uncertainty: fits.py (cumulative fit, bounded MLE), window.py, gof.py,
alternatives.py, bootstrap.py + resampling.py (the resampling unit), kernel.py (K(t) fits)."""
