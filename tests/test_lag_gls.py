"""Memory laws with correlated lags (analysis/fit/lag_laws.py, analysis/studies/memory.py):
synthetic ln m(k) of a known law with noise correlated between lags (a smooth Gaussian
process in ln k, as a shared context makes neighbouring lags move together). The generalised
least squares fit recovers the law and its exponent and keeps its χ² p calibrated; the
naive diagonal χ² takes the broken power law over the true power law far too often. A
profile whose replicates split between two laws gets no law verdict."""
import numpy as np
import pytest

from analysis.fit.lag_laws import LAWS, bic, fit_laws, gof_p
from analysis.fit.resampling import resampling_for
from analysis.studies.memory import (SHARE_MIN, SPLIT, MemoryProfile, MemoryStudy, compare_memory,
                                     fit_memory)

K_LAGS = np.arange(2, 29).astype(float)                    # 27 lags, as the demo's window
ALPHA = 1.5


def correlated(ell, var=0.01, nugget=0.1):
    """(n, n) covariance of ln m(k): a squared-exponential process in ln k of length `ell`
    (decades of e) plus an independent share `nugget`."""
    lk = np.log(K_LAGS)
    return var * (nugget * np.eye(len(lk))
                  + (1 - nugget) * np.exp(-np.subtract.outer(lk, lk) ** 2 / (2 * ell ** 2)))


def draws(cov, n, seed):
    rng = np.random.default_rng(seed)
    return -ALPHA * np.log(K_LAGS) + rng.multivariate_normal(np.zeros(len(K_LAGS)), cov, size=n)


def picks_and_p(Y, cov):
    """(share of rows whose BIC picks the power law, share whose power-law p < 0.01, α (B,))."""
    n = len(K_LAGS)
    f = fit_laws(K_LAGS, Y, cov)
    b = np.stack([bic(f[law].chi2, law, n) for law in LAWS])
    p = np.array([gof_p(c, "power law", n) for c in f["power law"].chi2])
    return (np.argmin(b, 0) == LAWS.index("power law")).mean(), (p < 0.01).mean(), \
        f["power law"].params["alpha"]


def test_uncorrelated_lags_gls_is_the_weighted_fit():
    """A diagonal covariance is weighted least squares: a vector of variances and its
    diagonal matrix give the same fit to the bit's rounding."""
    cov = correlated(0.3)
    Y = draws(cov, 20, 1)
    a, b = fit_laws(K_LAGS, Y, np.diag(cov)), fit_laws(K_LAGS, Y, np.diag(np.diag(cov)))
    for law in LAWS:
        np.testing.assert_allclose(a[law].chi2, b[law].chi2, rtol=1e-10)


def test_heavy_correlation_the_naive_chi2_rejects_the_true_law_and_gls_does_not():
    """400 profiles of a true power law with noise correlated over ~0.3 in ln k: GLS picks the
    power law in ≥ 85 % of them (BIC's consistency, ~90 % here), rejects it at p < 0.01 in
    ≤ 2.5 %, and recovers α within 0.01 on average; the diagonal χ² of the same profiles
    prefers the broken power law in ≥ 25 % (it reads correlated wiggles as a break)."""
    cov = correlated(0.3)
    Y = draws(cov, 400, 2)
    gls_pick, gls_reject, alpha = picks_and_p(Y, cov)
    naive_pick, _, _ = picks_and_p(Y, np.diag(cov))
    print(f"power law picked: GLS {gls_pick:.3f}, naive {naive_pick:.3f}; GLS p < 0.01: {gls_reject:.3f}")
    assert gls_pick >= 0.85 and gls_reject <= 0.025
    assert alpha.mean() == pytest.approx(ALPHA, abs=0.01)
    assert 1 - naive_pick >= 0.25


def _profile(rep_curves, value, var=1e-4, n_seq=None):
    """A MemoryProfile of lags 0..28 with jackknife replicates `rep_curves` (S, 29) over S
    sequences, point `value` (29,), lag variances `var`, uncorrelated."""
    S = len(rep_curves)
    plan = resampling_for(np.zeros(S * 4), np.repeat(np.arange(S), 4))
    n = len(value)
    return MemoryProfile("m", 0, "attention", value, value, value, np.full(n, var),
                         np.eye(n) * var, np.full(n, 100), "exact", 1, plan.unit, 0.9, None,
                         np.asarray(rep_curves), plan)


def test_replicates_that_split_between_two_laws_give_no_law():
    """10 sequences: leaving out any of five of them leaves a pure power law, any of the other
    five a clear break at k = 8. The point prefers one law, but only half the replicates
    agree: no law is named, nothing is compared, and the profile stays."""
    k = np.maximum(np.arange(29), 1.0)
    power = k ** -ALPHA
    broken = np.where(k <= 8, k ** -ALPHA, 8.0 ** 1.5 * k ** -(ALPHA + 1.5))
    reps = np.stack([power] * 5 + [broken] * 5)
    value = np.sqrt(power * broken)
    split = fit_memory(_profile(reps, value), window=(2, 28))
    assert split.share == pytest.approx(0.5) and split.share < SHARE_MIN
    assert split.verdict == SPLIT and split.law is None
    assert split.to_dict()["law"] is None and split.to_dict()["preferred_share"] == 0.5
    agree = fit_memory(_profile(np.stack([power] * 10), power), window=(2, 28))
    assert agree.verdict == "fits" and agree.law == "power law" and agree.share == 1.0
    studies = {"a": MemoryStudy("a", {}, {0: split}), "b": MemoryStudy("b", {}, {0: agree})}
    (d,) = compare_memory(studies, {"a": 0, "b": 0}, 0.9)
    assert d.what is None and SPLIT in d.verdict and "a" in d.verdict
