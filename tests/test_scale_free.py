"""An observable the weights' overall scale cannot move (analysis/studies/declarable.py,
`tail_widths`): on synthetic spectra of known law, multiplying every rate by one constant leaves
the tail width ln(λ_50/λ_10) of every token exactly as it was, while the window mode density and
the window slope β move; a change of the law's shape moves it, to the value the law gives
(ln 5 / (1 + β) for ρ ∝ λ^β from 0), so the test fails for a quantity that ignores the shape."""
from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.fit.fits import mle_ir_exponent
from analysis.fit.window import window_density
from analysis.studies.declarable import tail_widths

WINDOW = (1e-4, 5e-2)


def _tokens(rng, beta, n_tok=400, n_modes=200, lam_max=0.1, curved=False):
    """(n_tok, n_modes + 8) rates of ρ ∝ λ^β on (0, lam_max], NaN columns as unstable modes;
    `curved`: the exponent bends to β + 0.6 above lam_max/30 (a density that is not a law)."""
    lam = lam_max * rng.random((n_tok, n_modes)) ** (1 / (1 + beta))
    if curved:
        top = lam > lam_max / 30
        lam[top] = lam_max / 30 + (lam_max - lam_max / 30) * rng.random(top.sum()) ** (1 / (1.6 + beta))
    return np.concatenate([lam, np.full((n_tok, 8), np.nan)], axis=1)


@pytest.mark.parametrize("curved", [False, True])
def test_a_rescaling_of_the_rates_leaves_the_tail_width_and_moves_the_window_numbers(curved):
    rates = _tokens(np.random.default_rng(0), -0.2, curved=curved)
    for c in (0.25, 3.0):
        np.testing.assert_allclose(tail_widths(c * rates), tail_widths(rates), rtol=1e-12)
        moved = window_density(c * rates, window=WINDOW, n_boot=20).value
        assert abs(moved / window_density(rates, window=WINDOW, n_boot=20).value - 1) > 0.1
    flat = rates[np.isfinite(rates)]
    b1, b3 = (mle_ir_exponent(c * flat, WINDOW).beta for c in (1.0, 3.0))
    assert (abs(b3 - b1) > 0.05) == curved          # a pure law's β is scale-free too; a curved one's is not


@pytest.mark.parametrize("beta", [-0.5, -0.2, 0.5])
def test_the_tail_width_of_a_power_law_is_ln5_over_one_plus_beta(beta):
    w = tail_widths(_tokens(np.random.default_rng(1), beta, n_modes=400))
    assert np.isfinite(w).all()
    assert w.mean() == pytest.approx(math.log(5) / (1 + beta), rel=0.03)


def test_a_change_of_shape_moves_it():
    rng = np.random.default_rng(2)
    a, b = (tail_widths(_tokens(rng, beta)).mean() for beta in (-0.2, 0.3))
    assert a - b > 0.5
    straight, bent = (tail_widths(_tokens(rng, -0.2, curved=k)).mean() for k in (False, True))
    assert abs(straight - bent) > 0.2


def test_a_token_with_too_few_stable_modes_has_none():
    r = np.full((2, 20), np.nan)
    r[0, :9] = np.linspace(1e-3, 1e-2, 9)
    r[1, :10] = np.linspace(1e-3, 1e-2, 10)
    w = tail_widths(r)
    assert np.isnan(w[0]) and np.isfinite(w[1])
