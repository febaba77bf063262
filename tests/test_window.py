"""The local exponent β(λ), the in-window MLE's CI and the window-edge table, on spectra of
known law."""
import numpy as np
import pytest

from analysis import bootstrap_mle, local_exponent, window_sensitivity
from analysis.fit.window import edge_exponents

W = (1e-4, 5e-2)
KINK, B_LOW, B_HIGH = 3e-3, -0.5, 0.2


def kinked(rng, n_tok=1024, d=64, lo=1e-5, hi=0.2):
    """(n_tok, d) rates of a continuous density λ^B_LOW below KINK and ∝ λ^B_HIGH above."""
    c = KINK ** (B_LOW - B_HIGH)
    m1 = (KINK ** (B_LOW + 1) - lo ** (B_LOW + 1)) / (B_LOW + 1)
    m2 = c * (hi ** (B_HIGH + 1) - KINK ** (B_HIGH + 1)) / (B_HIGH + 1)
    below, q = rng.random(n_tok * d) < m1 / (m1 + m2), rng.random(n_tok * d)
    x1 = (lo ** (B_LOW + 1) + q * (KINK ** (B_LOW + 1) - lo ** (B_LOW + 1))) ** (1 / (B_LOW + 1))
    x2 = (KINK ** (B_HIGH + 1) + q * (hi ** (B_HIGH + 1) - KINK ** (B_HIGH + 1))) ** (1 / (B_HIGH + 1))
    return np.where(below, x1, x2).reshape(n_tok, d)


def test_the_local_exponent_finds_a_known_kink():
    r = kinked(np.random.default_rng(0))
    seq = np.repeat([0, 1], 512)
    le = local_exponent(r, seq, W, span=(1e-5, 0.2), n_boot=200)
    # the midpoint crossing within 0.15 decade of the kink
    assert abs(np.log10(le.crossing((B_LOW + B_HIGH) / 2) / KINK)) < 0.15
    far_below, far_above = le.centers < KINK / 10, le.centers > KINK * 10
    # below: ~100…1000 modes a sub-window, each within 0.3, their median within 0.08
    assert np.all(np.abs(le.beta[far_below] - B_LOW) < 0.3)
    assert abs(np.median(le.beta[far_below]) - B_LOW) < 0.08
    assert np.all(np.abs(le.beta[far_above] - B_HIGH) < 0.05)
    covered = (le.lo <= np.where(le.centers < KINK, B_LOW, B_HIGH)) & (
        np.where(le.centers < KINK, B_LOW, B_HIGH) <= le.hi)
    assert covered[far_below | far_above].mean() >= 0.7                # CIs hold the truth
    low, high = edge_exponents(r.ravel(), (1e-5, 0.2))
    assert low == pytest.approx(le.beta[0], abs=1e-9) and abs(high - B_HIGH) < 0.05          # the first sub-window


def test_mle_ci_recovers_beta_and_counts_modes_below():
    rng = np.random.default_rng(1)
    r = 0.1 * rng.random((512, 64)) ** (1 / 0.7)                       # ρ ∝ λ^−0.3 on (0, 0.1]
    m = bootstrap_mle(r, np.repeat([0, 1], 256), W, n_boot=300)
    assert m.lo < -0.3 < m.hi and m.hi - m.lo < 0.1
    assert m.n_below == int((r < W[0]).sum()) and m.n_modes == int(((r >= W[0]) & (r <= W[1])).sum())


def test_window_sensitivity_moves_only_the_edges_asked_and_flags_an_offset():
    """A power law plus 2000 modes far below the window: the MLE ignores them at every
    window; the cumulative fit is flattened, the more so the lower the lower edge."""
    rng = np.random.default_rng(2)
    r = np.concatenate([rng.random(512 * 64) ** (1 / 0.7), np.full(2000, 1e-7)])   # (0, 1]
    r = r[rng.permutation(len(r))][: 512 * 64].reshape(512, 64)
    ws = window_sensitivity(r, None, W, n_boot=50)
    assert [(x["edge"], x["factor"]) for x in ws.rows] == [
        (e, f) for e in ("lo", "hi") for f in (0.25, 0.5, 1.0, 2.0, 4.0)]
    for x in ws.rows:
        assert x["beta_mle"] == pytest.approx(-0.3, abs=0.06)
        assert x["beta_cumulative"] < x["beta_mle"]
    assert len(ws.local.centers) > 10 and ws.to_dict()["local"]["width_decades"] == 1.0
