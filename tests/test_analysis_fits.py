"""IR-exponent fits, bootstrap and MLE recover the known β of synthetic spectra."""
import numpy as np
import pytest
from scipy.special import gamma, gammainc

from analysis import (bootstrap_ir_exponent, fit_ir_exponent, fit_ir_from_hist, memory_kernel,
                      memory_kernel_from_hist, mle_ir_exponent, tdos_from_rates)
from analysis.spectrum.rates import histogram

WINDOW = (1e-4, 5e-2)


def contaminated_power_law(rng, beta, n=600_000, lam_max=0.06):
    """Density ∝ λ^β on (0, lam_max] plus contamination outside the window: a UV bulk
    (as many modes again, all above 6e-2) and isolated deep-IR modes (0.5% of N(<1e-4),
    at least 1) far below the window. n keeps N(<1e-4) >= ~150 for every β tested: the
    unweighted log N fit cannot be better than the counts at the window's lower edge."""
    s = beta + 1
    pl = lam_max * rng.random(n) ** (1 / s)
    uv = np.exp(rng.uniform(np.log(0.06), np.log(50), n))
    n_ir = max(1, int(0.005 * (pl < WINDOW[0]).sum()))
    ir = 10 ** rng.uniform(-9, -7, n_ir)
    return np.concatenate([pl, uv, ir])


@pytest.mark.parametrize("beta", [-0.5, -0.3, -0.17, 0.0, 0.3])
def test_fit_recovers_beta_and_counts_window_modes(beta):
    rng = np.random.default_rng(int(100 * (beta + 1)))
    r = contaminated_power_law(rng, beta)
    fit = fit_ir_exponent(r, WINDOW)
    assert abs(fit.beta - beta) < 0.02, fit
    assert fit.s == pytest.approx(fit.beta + 1)
    assert fit.r2 > 0.99
    assert fit.n_modes == int(((r >= 1e-4) & (r <= 5e-2)).sum())
    pts = fit_ir_exponent(r, WINDOW, points="rates")        # the alternative evaluation
    assert abs(pts.beta - beta) < 0.02 and pts.n_modes == fit.n_modes
    # the streaming path: the same grid fit from global-bin counts, bit for bit
    from_hist = fit_ir_from_hist(histogram(r), WINDOW)
    assert from_hist.s == fit.s and from_hist.r2 == fit.r2


def test_fit_grid_points_are_the_global_edges_in_window():
    # evenly spaced rates (k + 1/2)·1e-6: ρ flat, N(<λ) = round(1e6·λ), so β = 0 to 2e-4
    fit = fit_ir_exponent((np.arange(1_000_000) + 0.5) * 1e-6, WINDOW)
    assert fit.x[0] == pytest.approx(1e-4) and fit.x[-1] <= 5e-2
    assert len(fit.x) == 54 and np.allclose(np.diff(np.log10(fit.x)), 0.05)
    assert fit.beta == pytest.approx(0.0, abs=2e-4) and fit.r2 > 0.99999
    assert fit.n_modes == 50_000 - 100


@pytest.mark.parametrize("beta", [-0.5, -0.17, 0.3])
def test_mle_recovers_bounded_power_law(beta):
    rng = np.random.default_rng(7)
    lo, hi = WINDOW
    s = beta + 1                       # inverse CDF of p ∝ λ^β on [lo, hi]
    r = (lo ** s + rng.random(20_000) * (hi ** s - lo ** s)) ** (1 / s)
    out = np.concatenate([r, [1e-6, 0.3, 2.0]])            # outside the window: ignored
    mle = mle_ir_exponent(out, WINDOW)
    assert mle.n_modes == 20_000
    assert abs(mle.beta - beta) < 3 * mle.se and abs(mle.beta - beta) < 0.02
    # Fisher information of the exponential family in log λ: se = 1/sqrt(n Var[log λ])
    assert mle.se == pytest.approx(1 / np.sqrt(len(r) * np.log(r).var()), rel=0.05)


def block_trial(rng, beta, n_blocks=400, centers=12, dups=4, lam_max=0.06):
    """Correlated blocks: each of `centers` power-law rates spawns `dups` near-copies
    (×e^{0.05 z}; multiplicative jitter keeps a scale-free law scale-free)."""
    s = beta + 1
    c = lam_max * rng.random((n_blocks, centers, 1)) ** (1 / s)
    return list((c * np.exp(0.05 * rng.normal(size=(n_blocks, centers, dups)))).reshape(n_blocks, -1))


def test_independent_tokens_get_short_blocks_and_a_token_sized_interval():
    """Uncorrelated tokens: the measured autocorrelation gives k ≤ 3, and the interval is
    about as wide as the i.i.d. single-token one (coverage itself: test_bootstrap_coverage)."""
    blocks = block_trial(np.random.default_rng(11), -0.2)
    auto = bootstrap_ir_exponent(blocks, WINDOW, n_boot=400, seed=0)
    iid = bootstrap_ir_exponent(blocks, WINDOW, n_boot=400, seed=0, unit="tokens")
    assert auto.block_length <= 3 and iid.unit == "single tokens (i.i.d.)"
    assert 0.85 < (auto.hi - auto.lo) / (iid.hi - iid.lo) < 1.35
    assert auto.lo < auto.beta < auto.hi


def test_correlated_neighbours_are_found_and_blocked():
    """Feed each mode as its own 'token': 4 neighbours are near-copies. Drawing them i.i.d.
    shrinks the CI by ~2; the automatic rule measures the correlation and blocks them."""
    blocks = block_trial(np.random.default_rng(3), -0.2)
    by_block = bootstrap_ir_exponent(blocks, WINDOW, n_boot=300, seed=0, unit="tokens")
    singles = [[x] for x in np.concatenate(blocks)]
    by_mode = bootstrap_ir_exponent(singles, WINDOW, n_boot=300, seed=0, unit="tokens")
    auto = bootstrap_ir_exponent(singles, WINDOW, n_boot=300, seed=0)
    assert by_block.beta == by_mode.beta == auto.beta
    ratio = (by_block.hi - by_block.lo) / (by_mode.hi - by_mode.lo)
    assert 1.5 < ratio < 2.6, ratio
    assert auto.block_length >= 4
    assert 0.8 < (auto.hi - auto.lo) / (by_block.hi - by_block.lo) < 1.4


def test_memory_kernel_matches_laplace_transforms():
    n = 200_000
    u = (np.arange(n) + 0.5) / n                      # deterministic quantiles
    t = np.geomspace(1e-2, 1e3, 40)
    a, b = 0.1, 2.0                                   # uniform density on [a, b]
    K = memory_kernel(a + (b - a) * u, t).K
    np.testing.assert_allclose(K, (np.exp(-a * t) - np.exp(-b * t)) / ((b - a) * t), rtol=1e-4)
    beta, lam = -0.3, 1.0                             # ρ ∝ λ^β on (0, Λ]: K = s γ(s, Λt)/(Λt)^s
    s = beta + 1
    rates = lam * u ** (1 / s)
    exact = s * gamma(s) * gammainc(s, lam * t) / (lam * t) ** s
    np.testing.assert_allclose(memory_kernel(rates, t).K, exact, rtol=2e-3)
    # the binned kernel (log-uniform inside each 1/20-decade bin) follows within 1%
    np.testing.assert_allclose(memory_kernel_from_hist(tdos_from_rates(rates), t).K, exact, rtol=1e-2)
    # long times: K ~ t^-(1+β)
    slope = np.polyfit(np.log(t[-10:]), np.log(exact[-10:]), 1)[0]
    assert slope == pytest.approx(-(1 + beta), abs=0.01)
