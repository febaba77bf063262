"""How long a block of tokens must be, and how many independent units a spread is learned
from: the Politis–White automatic block length of a per-token series (Politis & White 2004,
with the correction of Patton, Politis & White 2009, circular-bootstrap constant) and the
effective degrees of freedom of a variance from heavy-tailed unit sums (resampling.py uses
both)."""
from __future__ import annotations

import numpy as np
from scipy import stats


def effective_dof(unit_sums, n_units):
    """Degrees of freedom of a variance learned from n_units units whose sums (the per-unit
    totals of the influence series) have excess kurtosis κ: Var(s²)/σ⁴ ≈ (2 + κ)/n_units,
    and a scaled χ² with that relative variance has 2·n_units/(2 + κ) degrees of freedom
    (n_units − 1 for Gaussian sums, fewer for heavy-tailed ones). κ < 0 is taken as 0."""
    s = np.asarray(unit_sums, np.float64)
    kappa = max(stats.kurtosis(s, bias=False), 0.0) if len(s) > 3 and s.std() > 0 else 0.0
    return max(2 * n_units / (2 + kappa) - 1, 1.0)


def autocorrelation(x, seq, max_lag):
    """ρ(0..max_lag) of x about its grand mean, from pairs inside one sequence only."""
    x = np.asarray(x, np.float64) - np.mean(x)
    R = np.zeros(max_lag + 1)
    for s in np.unique(seq):
        xs = x[seq == s]
        for m in range(min(max_lag, len(xs) - 1) + 1):
            R[m] += xs[:len(xs) - m] @ xs[m:]
    R /= len(x)
    return R / R[0] if R[0] > 0 else np.r_[1.0, np.zeros(max_lag)]


def politis_white(x, seq):
    """(k, ρ, G/g): the Politis–White circular-block length of series x, the ρ it used, and
    the ratio G/g that sets the block variance's first-order bias −G/(k·g).

    m̂ = the first lag after which K_N = max(5, ⌈√log10 N⌉) consecutive |ρ| stay below
    2√(log10 N / N); with the flat-top window λ over lags |m| ≤ M = 2m̂,
    G = Σ λ(m/M)|m|R(m), g = Σ λ(m/M)R(m), k = (2G² / ((4/3)g²))^{1/3} N^{1/3}."""
    x = np.asarray(x, np.float64)
    n = len(x)
    kn = max(5, int(np.ceil(np.sqrt(np.log10(max(n, 10))))))
    m_max = max(1, min(int(np.ceil(np.sqrt(n))) + kn, n - 1))
    rho = autocorrelation(x, seq, m_max)
    if n < 4 or not np.isfinite(rho).all():
        return 1, rho, 0.0
    small = np.abs(rho[1:]) < 2 * np.sqrt(np.log10(n) / n)           # lags 1..m_max
    runs = [m for m in range(0, m_max - kn + 1) if small[m:m + kn].all()]
    M = min(2 * max(runs[0] if runs else m_max, 1), m_max)
    lag = np.arange(-M, M + 1)
    a = np.abs(lag) / M
    w = np.where(a <= 0.5, 1.0, np.where(a <= 1, 2 * (1 - a), 0.0))   # flat-top window
    r = rho[np.abs(lag)]
    G, g = (w * np.abs(lag) * r).sum(), (w * r).sum()
    if g <= 0:
        return 1, rho, 0.0
    k = max(1, int(np.ceil((2 * G ** 2 / (4 / 3 * g ** 2)) ** (1 / 3) * n ** (1 / 3))))
    return k, rho, max(G / g, 0.0)
