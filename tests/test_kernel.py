"""The memory kernel's long-time exponent recovers 1+β of spectra with a closed-form K(t)."""
import numpy as np
import pytest
from scipy.special import gamma, gammainc

from analysis import memory_kernel, memory_kernel_from_hist, tdos_from_rates
from analysis.fit.kernel import T_RANGE, kernel_exponent_from_hists
from analysis.spectrum.rates import histogram_rows

BETA, N_SEQ, N_TOK, D = -0.3, 2, 256, 64


def closed_form(t, beta, lam=1.0):
    """K(t) of ρ ∝ λ^β on (0, Λ]: s·γ(s, Λt)/(Λt)^s, s = 1+β."""
    s = 1 + beta
    return s * gamma(s) * gammainc(s, lam * t) / (lam * t) ** s


def tokens(rng, beta=BETA):
    """(N_SEQ·N_TOK, D) rates with ρ ∝ λ^β on (0, 1], and their sequence ids."""
    lam = rng.random((N_SEQ * N_TOK, D)) ** (1 / (1 + beta))
    return lam, np.repeat(np.arange(N_SEQ), N_TOK)


def test_window_times_mirror_the_fit_window():
    assert T_RANGE == pytest.approx((20.0, 1e4))


def test_kernel_exponent_recovers_one_plus_beta_of_the_closed_form():
    lam, seq = tokens(np.random.default_rng(0))
    ker = kernel_exponent_from_hists(histogram_rows(lam), seq, BETA, (BETA - 0.02, BETA + 0.02),
                                     n_boot=300)
    # the binned K follows the closed form over the fit's times (to the sampling noise of the
    # ~50 modes below 1e-4 that carry K at t = 1e4), and the exact mean of the same rates closely
    np.testing.assert_allclose(ker.K, closed_form(ker.t, BETA), rtol=0.1)
    np.testing.assert_allclose(ker.K, memory_kernel(lam.ravel(), ker.t).K, rtol=0.01)
    # the closed form's own slope over these times is 1+β (Λt ≥ 20: γ(s, Λt) ≈ Γ(s))
    exact = -np.polyfit(np.log(ker.t), np.log(closed_form(ker.t, BETA)), 1)[0]
    assert exact == pytest.approx(1 + BETA, abs=1e-3)
    assert ker.lo <= exact <= ker.hi, ker.describe()
    assert ker.hi - ker.lo < 0.1 and ker.lo <= 1 + BETA <= ker.hi
    assert "not a check" in ker.describe() and "consistent" not in ker.to_dict()
    assert ker.unit == "jackknife over 2 sequences, t(1)" and ker.n_modes == lam.size


def test_kernel_matches_the_observables_path_exactly():
    lam, seq = tokens(np.random.default_rng(1))
    ker = kernel_exponent_from_hists(histogram_rows(lam), seq, n_boot=20)
    ref = memory_kernel_from_hist(tdos_from_rates(lam.ravel()), ker.t).K
    np.testing.assert_allclose(ker.K, ref, rtol=1e-12)


def test_a_steeper_spectrum_is_told_apart():
    """β = 0 data against a β = −0.3 prediction: the CI excludes it."""
    lam, seq = tokens(np.random.default_rng(2), beta=0.0)
    ker = kernel_exponent_from_hists(histogram_rows(lam), seq, BETA, (BETA - 0.02, BETA + 0.02),
                                     n_boot=300)
    assert ker.lo <= 1.0 <= ker.hi and not ker.lo <= 1 + BETA <= ker.hi, ker.describe()


def test_every_result_plots_on_a_given_axes():
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from analysis import bootstrap_ir_from_hists
    from analysis.laws.selfavg import ir_resolution_from_hists, self_averaging_from_hists
    from analysis.laws.uncertainty import MeasuredLaws
    lam, seq = tokens(np.random.default_rng(3))
    h = histogram_rows(lam)
    by_seq = [h[seq == s] for s in range(N_SEQ)]
    boot = bootstrap_ir_from_hists(h, seq=seq, n_boot=50)
    laws = MeasuredLaws(0, N_TOK, boot.beta, (boot.lo, boot.hi), boot.unit,
                        self_averaging_from_hists(by_seq),
                        ir_resolution_from_hists(by_seq, D, boot.beta, (boot.lo, boot.hi)),
                        kernel_exponent_from_hists(h, seq, boot.beta, (boot.lo, boot.hi), n_boot=50))
    for obj in (boot, boot.resampling, laws, laws.self_averaging, laws.resolution, laws.kernel,
                next(iter(laws.resolution.fits.values()))):
        ax = Figure().add_subplot()
        assert obj.plot(ax) is ax and ax.has_data()
    assert laws.to_dict()["memory_kernel"]["unit"] == boot.unit
