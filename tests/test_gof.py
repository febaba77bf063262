"""Power-law goodness of fit and the likelihood-ratio alternatives, on synthetic rates of
known law (tolerances stated at each assert)."""
import warnings

import numpy as np
import powerlaw
import pytest

from analysis import compare_alternatives, power_law_gof
from analysis.fit.fits import mle_ir_exponent

W = (1e-4, 5e-2)


def bounded_power_law(rng, n, beta, window=W):
    """n rates with density ∝ λ^β on the window (inverse CDF)."""
    lo, hi = window
    s = beta + 1
    return (lo ** s + rng.random(n) * (hi ** s - lo ** s)) ** (1 / s)


def bounded_lognormal(rng, n, mu=np.log(3e-3), sigma=1.0, window=W):
    x = np.exp(rng.normal(mu, sigma, 20 * n))
    return x[(x >= window[0]) & (x <= window[1])][:n]


def test_p_below_0_10_in_about_10_percent_of_true_power_laws():
    """300 sets of 1000 rates, β = −0.3, 100 Monte-Carlo sets each: the share with p < 0.10
    lies within 0.10 ± 0.06 (3.5 binomial standard deviations of 300 sets)."""
    p = np.array([power_law_gof(bounded_power_law(np.random.default_rng(100 + i), 1000, -0.3), W,
                                n_sims=100, seed=i).p_value for i in range(300)])
    assert 0.04 <= (p < 0.10).mean() <= 0.16, (p < 0.10).mean()
    assert 0.35 <= (p < 0.5).mean() <= 0.65          # p roughly uniform, not piled up


def test_a_truncated_lognormal_is_rejected_and_the_lognormal_preferred():
    r = bounded_lognormal(np.random.default_rng(1), 5000)
    g = power_law_gof(r, W, n_sims=200, seed=0)
    assert g.n == 5000 and g.p_value < 0.01 and g.ks > 0.05, g.describe()
    alt = compare_alternatives(r, W)
    assert alt["lognormal"].R < -5 and alt["lognormal"].p < 1e-6 and alt["lognormal"].nested
    assert alt["lognormal"].params["sigma"] == pytest.approx(1.0, rel=0.1)   # the truth: σ = 1
    assert alt["lognormal"].favoured() == "lognormal"


def test_a_true_power_law_is_not_beaten_by_any_alternative():
    r = bounded_power_law(np.random.default_rng(2), 20_000, -0.3)
    g = power_law_gof(r, W, n_sims=200, seed=0)
    assert g.p_value > 0.1 and abs(g.beta + 0.3) < 3 * g.se
    alt = compare_alternatives(r, W)
    assert set(alt) == {"lognormal", "exponential", "stretched_exponential"}
    assert alt["exponential"].R > 5 and alt["exponential"].favoured() == "power law"
    for name in ("lognormal", "stretched_exponential"):   # nested: never below the power law
        assert alt[name].R <= 0 and alt[name].p > 0.1 and alt[name].favoured() == "neither"


@pytest.mark.parametrize("beta", [-0.7, -0.3, -0.1])
def test_beta_and_ks_equal_the_powerlaw_package(beta):
    """powerlaw's Fit(xmin, xmax) fits p ∝ x^−α on the same window (α = −β; it bounds α ≥ 0,
    so only β < 0 compares): β to 2e-3 (its optimiser's tolerance), KS to 1e-3."""
    r = bounded_power_law(np.random.default_rng(3), 20_000, beta)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = powerlaw.Fit(r, xmin=W[0], xmax=W[1], verbose=False)
    g = power_law_gof(r, W, n_sims=20, seed=0)
    assert g.beta == pytest.approx(-fit.power_law.alpha, abs=2e-3)
    assert g.ks == pytest.approx(fit.power_law.D, abs=1e-3)


def test_an_empty_window_fits_nothing():
    r = bounded_power_law(np.random.default_rng(4), 1000, -0.3)
    g = power_law_gof(r, (10.0, 100.0), n_sims=20)
    assert g.n == 0 and not g.fitted and np.isnan(g.beta) and np.isnan(g.p_value)
    assert "not tested" in g.describe()
    assert compare_alternatives(r, (10.0, 100.0)) == {}
    assert np.isnan(mle_ir_exponent(r, (10.0, 100.0)).beta)


def test_results_plot_on_given_axes():
    from matplotlib.figure import Figure
    r = bounded_power_law(np.random.default_rng(5), 2000, -0.3)
    for obj in (power_law_gof(r, W, n_sims=20), compare_alternatives(r, W)["lognormal"]):
        ax = Figure().add_subplot()
        assert obj.plot(ax) is ax and ax.has_data()
