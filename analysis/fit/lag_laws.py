"""Laws of a decaying lag profile m(k): generalised least squares of ln m(k) at lags k, for
one profile or a batch of them (the replicates) with the same covariance.

- exponential        ln m = a − k/ξ                                    2 parameters
- power law          ln m = a − α ln k                                 2 parameters
- broken power law   ln m = a − α₁ ln k − (α₂ − α₁)·max(ln k − ln k_b, 0)   4 parameters
                     (continuous at the break k_b; α₁ before it, α₂ after)

The errors of ln m(k) at different lags are correlated: the same tokens enter every lag
(their per-token ln m_t(k) correlate 0.5–0.7 between neighbouring lags in the demo's
models). χ² is therefore the Mahalanobis norm of the residual, rᵀ C⁻¹ r with C the lags'
covariance, computed as ‖R r‖² with R = L⁻¹ (C = L Lᵀ, Cholesky): every law is ordinary least
squares on the whitened lags R·ln m and R·X. A diagonal C is weighted least squares. With C
right, χ² of a true law is χ²_{n−p}; the naive diagonal χ² of correlated errors is a
weighted sum of few χ²₁ terms, whose tail is heavier, so it rejects true laws too often
(tests/test_memory_analysis.py measures both).

Given k_b the broken law is linear in (a, α₁, α₂), so k_b is found by scanning
`BREAKS` log-spaced values from the second lag to the second-to-last (each segment keeps at
least two lags), then refining the best by golden-section search between its neighbours:
deterministic, no starting point.

Model choice is by BIC = χ² + p·ln n (n lags, p parameters; −2 ln L up to a constant for
Gaussian errors of known covariance). BIC rather than AIC because the question is which law
the profile follows, not which curve predicts it best: BIC is consistent, while AIC takes
the broken power law over a true single power law whenever its two extra parameters buy a
χ² drop of 4 (χ²₂ exceeds 4 with probability 0.14, and more for a break scanned over lags),
BIC only past 2 ln n (≈ 6.8 at n = 29, probability ≈ 0.03).

Each law's goodness of fit is p = P(χ²_dof > χ²), dof = n − p; the covariance is estimated,
so p is approximate.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

LAWS = ("exponential", "power law", "broken power law")
N_PARAMS = {"exponential": 2, "power law": 2, "broken power law": 4}
PARAMS = {"exponential": ("xi",), "power law": ("alpha",),
          "broken power law": ("alpha_1", "alpha_2", "k_break")}
BREAKS = 100          # candidate breaks scanned between the second and second-to-last lag
GOLDEN_STEPS = 30     # golden-section steps about the best: (0.618^30 ≈ 5e-7) × the grid step
P_REJECT = 0.01       # a preferred law with p below this: "neither law fits"


@dataclass
class LawBatch:
    """One law fitted to B profiles: parameters (B,) each, intercepts and χ² (B,)."""
    law: str
    params: dict              # {name: (B,)} as PARAMS[law]
    intercept: np.ndarray     # (B,) a
    chi2: np.ndarray          # (B,)


def curve(law: str, intercept: float, params: dict, k) -> np.ndarray:
    """ln m(k) of `law` with `intercept` and `params` ({name: value}) at lags k."""
    k = np.asarray(k, np.float64)
    if law == "exponential":
        return intercept - k / params["xi"]
    if law == "power law":
        return intercept - params["alpha"] * np.log(k)
    kink = np.maximum(np.log(k) - np.log(params["k_break"]), 0)
    return intercept - params["alpha_1"] * np.log(k) - (params["alpha_2"] - params["alpha_1"]) * kink


def whitener(cov) -> np.ndarray:
    """(n, n) R with Rᵀ R = C⁻¹ for a covariance C (n, n) of the lags (a (n,) vector: the
    diagonal of an uncorrelated C), so that χ² = ‖R r‖²."""
    c = np.asarray(cov, np.float64)
    if c.ndim == 1:
        return np.diag(1 / np.sqrt(c))
    return np.linalg.inv(np.linalg.cholesky(c))


def fit_laws(k, Y, cov) -> dict:
    """{law: LawBatch} of every law LAWS holds that the lags can carry (n > parameters) for
    log-profiles Y (B, n) at lags k (n,), the lags' covariance `cov` (n, n), or (n,) variances
    of uncorrelated lags; rows with a non-finite entry get NaN."""
    k = np.asarray(k, np.float64)
    Y = np.atleast_2d(np.asarray(Y, np.float64))                          # (B, n)
    ok = np.isfinite(Y).all(1)
    R = whitener(cov)                                                     # (n, n)
    Yw = np.where(ok[:, None], Y, 0.0) @ R.T                              # (B, n) whitened
    out = {}
    if len(k) > 2:
        for law, x in (("exponential", k), ("power law", np.log(k))):
            coef, chi2 = _ols(R @ np.stack([np.ones_like(k), x], 1), Yw)
            with np.errstate(divide="ignore"):     # a non-decaying profile: ξ = inf
                scale = np.where(coef[1] < 0, -1 / coef[1], np.inf) if law == "exponential" \
                    else -coef[1]
            out[law] = _batch(law, {PARAMS[law][0]: scale}, coef[0], chi2, ok)
    if len(k) > 5:                          # two lags per segment, two degrees of freedom
        out["broken power law"] = _broken(k, Yw, R, ok)
    return out


def _broken(k, Yw, R, ok) -> LawBatch:
    """The broken power law: per row, the best of BREAKS hinge positions, then refined by
    golden-section search between its two neighbours (χ² is smooth in ln k_b between lags)."""
    lk = np.log(k)
    grid = np.linspace(lk[1], lk[-2], BREAKS)
    chi2 = np.stack([_hinge(lk, Yw, R, np.full(len(Yw), lb))[1] for lb in grid])   # (BREAKS, B)
    i = np.argmin(chi2, 0)
    lo, hi = grid[np.maximum(i - 1, 0)], grid[np.minimum(i + 1, BREAKS - 1)]
    g = (np.sqrt(5) - 1) / 2
    for _ in range(GOLDEN_STEPS):
        x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
        left = _hinge(lk, Yw, R, x1)[1] <= _hinge(lk, Yw, R, x2)[1]
        hi, lo = np.where(left, x2, hi), np.where(left, lo, x1)
    lb = (lo + hi) / 2
    coef, best = _hinge(lk, Yw, R, lb)                                    # (B, 3), (B,)
    params = {"alpha_1": -coef[:, 1], "alpha_2": -(coef[:, 1] + coef[:, 2]), "k_break": np.exp(lb)}
    return _batch("broken power law", params, coef[:, 0], best, ok)


def _hinge(lk, Yw, R, lb):
    """(coef (B, 3), χ² (B,)) of whitened row b of Yw on R·[1, ln k, max(ln k − lb_b, 0)]."""
    X = np.stack(np.broadcast_arrays(np.ones_like(lk), lk, np.maximum(lk - lb[:, None], 0)), -1)
    Xw = np.einsum("mn,bni->bmi", R, X)                                   # (B, n, 3)
    A = np.einsum("bni,bnj->bij", Xw, Xw)                                 # (B, 3, 3)
    coef = np.linalg.solve(A, np.einsum("bni,bn->bi", Xw, Yw)[..., None])[..., 0]
    resid = Yw - np.einsum("bni,bi->bn", Xw, coef)
    return coef, (resid ** 2).sum(1)


def _ols(Xw, Yw):
    """(coef (q, B), χ² (B,)) of every whitened row of Yw (B, n) on the columns of Xw (n, q)."""
    coef = np.linalg.solve(Xw.T @ Xw, Xw.T @ Yw.T)                        # (q, B)
    resid = Yw.T - Xw @ coef                                              # (n, B)
    return coef, (resid ** 2).sum(0)


def _batch(law, params, intercept, chi2, ok) -> LawBatch:
    nan = lambda v: np.where(ok, v, np.nan)                               # noqa: E731
    return LawBatch(law, {n: nan(v) for n, v in params.items()}, nan(intercept), nan(chi2))


def bic(chi2, law: str, n: int):
    """BIC = χ² + p ln n of `law` on n lags."""
    return chi2 + N_PARAMS[law] * np.log(n)


def gof_p(chi2: float, law: str, n: int) -> float:
    """P(χ²_dof > χ²), dof = n − parameters (χ² with the lags' covariance: `fit_laws`)."""
    dof = n - N_PARAMS[law]
    return float(stats.chi2.sf(chi2, dof)) if dof > 0 and np.isfinite(chi2) else np.nan
