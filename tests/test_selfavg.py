"""Self-averaging laws (App. B) recover their known slopes on i.i.d. power-law spectra."""
import numpy as np
import pytest

from analysis.laws.selfavg import (BANDS, _band_cols, _log_variance, ir_resolution_from_hists,
                                   kth_smallest, self_averaging_from_hists)
from analysis.spectrum.rates import BINS_PER_DECADE, EDGES, LOG10_LO, N_COLS, histogram_rows

N_SEQ, N_TOK, D, BETA = 2, 512, 64, -0.3


def power_law_tokens(rng, beta=BETA, s_t=None):
    """(N_SEQ, N_TOK, D) rates with ρ ∝ λ^β on (0, 1] (per-token exponent s_t − 1 if given)."""
    s = (1 + beta) if s_t is None else s_t[..., None]
    return rng.random((N_SEQ, N_TOK, D)) ** (1 / s)


def hists_by_seq(lam):
    col = np.floor((np.log10(lam) - LOG10_LO) * BINS_PER_DECADE).astype(np.int64) + 1
    n = N_TOK
    col += N_COLS * np.arange(n)[:, None]
    return [np.bincount(c.ravel(), minlength=n * N_COLS).reshape(n, N_COLS) for c in col]


def test_binning_matches_the_global_histogram():
    lam = power_law_tokens(np.random.default_rng(0))
    assert (hists_by_seq(lam)[1] == histogram_rows(lam[1])).all()


def test_band_weight_variance_falls_like_one_over_T_for_independent_tokens():
    sa = self_averaging_from_hists(hists_by_seq(power_law_tokens(np.random.default_rng(1))))
    assert list(sa.T) == [1, 2, 4, 8, 16, 32, 64, 128] and sa.n_windows[0] == N_SEQ * N_TOK
    for band, fit in sa.fits.items():
        assert fit.lo <= -1 <= fit.hi, fit.describe()
        assert fit.hi - fit.lo < 0.35, fit.describe()
        assert fit.consistent and fit.expected == -1
    # the unbiased variance at T = 1 is the binomial one: p(1−p)/d relative to p²
    cols = _band_cols(*BANDS["fit window 1e-4–5e-2"])                   # whole bins inside the band
    p = EDGES[cols[-1]] ** (1 + BETA) - EDGES[cols[0] - 1] ** (1 + BETA)
    assert sa.rel_var["fit window 1e-4–5e-2"][0] == pytest.approx((1 - p) / (p * D), rel=0.1)


def test_drifting_tokens_do_not_self_average_like_one_over_T():
    """Negative control: a slowly drifting exponent (AR(1), φ = 0.99) adds a variance that
    does not fall with T until T passes the drift's memory, so the slope is far above −1."""
    rng = np.random.default_rng(2)
    a = np.zeros((N_SEQ, N_TOK))
    e = rng.normal(size=(N_SEQ, N_TOK))
    a[:, 0] = e[:, 0]
    for t in range(1, N_TOK):
        a[:, t] = 0.99 * a[:, t - 1] + np.sqrt(1 - 0.99 ** 2) * e[:, t]
    sa = self_averaging_from_hists(hists_by_seq(power_law_tokens(rng, s_t=0.7 + 0.2 * a)))
    fit = sa.fits["fit window 1e-4–5e-2"]
    assert fit.lo > -0.8 and not fit.consistent, fit.describe()


def test_log_variance_is_corrected_for_its_own_bias():
    rng = np.random.default_rng(3)
    w = rng.normal(size=(3000, 5)) * 2.0
    est = np.array([_log_variance(x) for x in w])                          # (3000, 2)
    naive = np.log(w.var(1, ddof=1))
    assert est[:, 0].mean() == pytest.approx(np.log(4.0), abs=0.05)        # corrected
    assert naive.mean() < np.log(4.0) - 0.2                                # ln of unbiased s² is low
    assert est[:, 1].mean() == pytest.approx(naive.var(), rel=0.35)        # its variance, roughly


def test_kth_smallest_from_histograms_is_within_one_bin_of_the_exact_one():
    lam = power_law_tokens(np.random.default_rng(4))[0, :64].reshape(8, -1)   # 8 windows
    h = histogram_rows(lam)
    for k in (1, 2, 4):
        exact = np.sort(lam, 1)[:, k - 1]
        assert np.all(np.abs(np.log10(kth_smallest(h, k) / exact)) <= 1 / BINS_PER_DECADE)


def test_deep_ir_resolution_scales_like_modes_to_minus_one_over_one_plus_beta():
    h = hists_by_seq(power_law_tokens(np.random.default_rng(5)))
    res = ir_resolution_from_hists(h, D, BETA, beta_ci=(BETA - 0.02, BETA + 0.02))
    for k, fit in res.fits.items():
        assert fit.expected == pytest.approx(-1 / (1 + BETA))
        assert fit.lo <= -1 / (1 + BETA) <= fit.hi, fit.describe()
        assert fit.hi - fit.lo < 0.45 and fit.consistent, fit.describe()
    assert list(res.n_modes[:2]) == [D, 2 * D]
