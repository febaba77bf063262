"""Not enough data is a result (analysis/fit/enough.py) and the quantization's spread is read
by an upper bound (analysis/studies/quant_spread.py): the minimum for β rests on a standard
error that independent draws reproduce; an estimate below its minimum prints "not enough data
(n = …, needs …)" and never "nan"; the χ² bound of a handful of members' sd gives the issue's
0.070 for sd 0.016 of 3 members at 90 % and covers σ as often as it says."""
from __future__ import annotations

import numpy as np
import pytest

from analysis.fit.enough import MINIMUMS, beta_se, enough, format_estimate, worst
from analysis.fit.fits import mle_ir_exponent
from analysis.studies.quant_spread import quant_spread, sd_upper
from analysis.studies.declarable import Measured


def test_the_beta_minimum_rests_on_a_standard_error_that_draws_reproduce():
    rng = np.random.default_rng(0)
    lo, hi, beta, n = 1e-4, 5e-2, -0.2, 500
    # n modes of ρ ∝ λ^β inside [lo, hi] (inverse CDF of the bounded law)
    u = rng.random((300, n))
    a = 1 + beta
    lam = (lo ** a + u * (hi ** a - lo ** a)) ** (1 / a)
    fits = np.array([mle_ir_exponent(x, (lo, hi)).beta for x in lam])
    assert fits.std() == pytest.approx(beta_se(n, beta, (lo, hi)), rel=0.15)
    assert beta_se(500) < 0.05 < beta_se(100)
    assert MINIMUMS["beta"].needs == 500


def test_below_its_minimum_an_estimate_reads_not_enough_data():
    short = enough("beta", 86)
    assert not short and short.text == "not enough data (n = 86 stable modes in the window, needs 500)"
    assert format_estimate(float("nan"), float("nan"), float("nan"), short) == short.text
    assert format_estimate(float("nan")) == "not measured"
    assert format_estimate(-0.2621, -0.2753, -0.2481, enough("beta", 5000)) == \
        "\u22120.262 [\u22120.275, \u22120.248]"
    assert worst(enough("beta", 900), enough("t_interval", 1)).name == "t_interval"
    assert enough("t_interval", 2).ok and enough("t_interval", 2).text == ""


def test_the_spread_bound_is_the_chi_square_upper_end():
    assert sd_upper(0.016, 3, 0.9) == pytest.approx(0.0706, abs=5e-4)       # the 0.070
    rng = np.random.default_rng(1)
    for n in (3, 8):
        sds = rng.normal(0, 1.0, (4000, n)).std(axis=1, ddof=1)
        covered = np.mean([sd_upper(s, n, 0.9) >= 1.0 for s in sds])
        assert covered == pytest.approx(0.95, abs=0.015)                    # upper end of a 90 % interval


def test_the_spread_against_delta_uses_the_bound():
    def m(v):
        return Measured(v, v - 0.1, v + 0.1, "", np.inf, enough("token_mean", 10), "")
    q = quant_spread({"q.0": m(-0.25), "q.1": m(-0.27), "q.2": m(-0.28)}, 1, 0.9, -0.18)
    assert q.sd == pytest.approx(np.std([-0.25, -0.27, -0.28], ddof=1))
    assert q.of_delta == pytest.approx(q.sd_upper / 0.18) and q.sd_upper > 4 * q.sd
    assert quant_spread({"q.0": m(0.1)}, 1, 0.9, 0.2).check.text == \
        "not enough data (n = 1 ensemble members, needs 2)"
