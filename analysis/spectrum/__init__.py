"""Rates of a block's eigenvalues under a mode count (rates.py) and the observables built
on them: TDOS, K(t), Δ_t and A_log distributions (observables.py)."""
