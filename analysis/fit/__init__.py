"""β and its uncertainty: fits.py (cumulative fit, bounded MLE), window.py, gof.py,
alternatives.py, bootstrap.py + resampling.py (the resampling unit), kernel.py (K(t) fits),
lag_laws.py (exponential, power law and broken power law of a lag profile, BIC, χ² p)."""
