"""Power law or something else inside the window? Likelihood-ratio tests of the bounded power
law against a log-normal, an exponential and a stretched exponential, each truncated to the
same window and fitted by maximum likelihood (Clauset, Shalizi & Newman 2009 §5).

Every density is written for u = ln(λ/lo) on [0, w], w = ln(hi/lo) (a change of variable
shared by all models, so it cancels in every ratio), with x = λ/hi for the scale-bearing
alternatives:

| model | density of λ on [lo, hi] | parameters |
|---|---|---|
| power law | ∝ λ^β | β |
| log-normal | ∝ λ⁻¹ exp(−(ln λ − μ)²/2σ²) | μ, σ |
| exponential | ∝ exp(−κλ) | κ (either sign) |
| stretched exponential | ∝ λ^(b−1) exp(−c λ^b) | b > 0, c (either sign) |

For each alternative: l_i = ln p_power(λ_i) − ln p_alt(λ_i) and R = Σ l_i / (σ_l √n), the
normalised log-likelihood ratio (R > 0 favours the power law). Its p depends on whether the
alternative contains the power law:

- **not nested** (the exponential; the stretched exponential when β ≤ −1): Vuong's two-sided
  p = erfc(|R|/√2), the probability of an |R| this large if both fitted models were equally
  close to the truth;
- **nested** (inside a truncated window the log-normal tends to the power law as σ → ∞ with
  μ/σ² = β + 1, and the stretched exponential does at c → 0 when β > −1): the alternative's
  likelihood is never below the power law's, so R ≤ 0, and Vuong's statistic does not apply
  (σ_l → 0 as the two coincide). p is then the likelihood-ratio test's, 2·(ln L_alt −
  ln L_power) against χ² with 1 degree of freedom (Clauset et al. 2009, §5.2): a small p says
  the extra parameter is needed. Where the optimiser ends below the power law's likelihood,
  the alternative is taken at its power-law limit (R = 0, p = 1).

Modes are taken as independent draws (as in analysis/fit/gof.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, special, stats

from analysis._plot import axes_or_new
from analysis.fit.fits import WINDOW, in_window, mle_ir_exponent
from analysis.fit.gof import MIN_MODES

ALTERNATIVES = ("lognormal", "exponential", "stretched_exponential")


@dataclass
class Alternative:
    """The power law against one truncated alternative on `window`."""
    name: str
    R: float                   # normalised log-likelihood ratio, > 0 favours the power law
    p: float                   # Vuong's two-sided p (not nested) or the LR test's (nested)
    nested: bool               # whether the alternative contains the power law as a limit
    llr: float                 # Σ l_i (natural log)
    params: dict               # the alternative's fitted parameters
    loglik_power_law: float
    loglik_alternative: float
    n: int
    window: tuple
    l_i: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    rates: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)   # sorted, in window

    def favoured(self, level=0.9) -> str:
        """"power law", the alternative's name, or "neither" at significance 1 − level."""
        if not np.isfinite(self.p) or self.p >= 1 - level:
            return "neither"
        return "power law" if self.R > 0 else self.name

    def to_dict(self) -> dict:
        return {"R": self.R, "p": self.p, "nested": self.nested, "llr": self.llr, "params": self.params, "n": self.n,
                "loglik_power_law": self.loglik_power_law,
                "loglik_alternative": self.loglik_alternative, "window": list(self.window)}

    def plot(self, ax=None):
        """Σ l_i over the rates below λ, against λ: where in the window the evidence sits."""
        ax = axes_or_new(ax)
        ax.semilogx(self.rates, np.cumsum(self.l_i), "-")
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xlabel("relaxation rate λ (per block)")
        ax.set_ylabel(f"cumulative ln p_power − ln p_{self.name}")
        ax.set_title(f"R = {self.R:+.2f}, p = {self.p:.3g}", fontsize=9)
        return ax


def _log_int_exp(k, a, b):
    """ln ∫_a^b e^{−k v} dv, 0 ≤ a < b, any real k."""
    if abs(k) * (b - a) < 1e-12:
        return np.log(b - a)
    if k > 0:
        return -k * a + np.log(-np.expm1(-k * (b - a))) - np.log(k)
    return -k * b + np.log(-np.expm1(k * (b - a))) - np.log(-k)


def _log_phi_diff(a, b):
    """ln(Φ(b) − Φ(a)), a < b, from the side where both tails are smallest."""
    if a > 0:
        a, b = -b, -a
    lb, la = special.log_ndtr(b), special.log_ndtr(a)
    return lb + np.log(-np.expm1(la - lb))


def _lognormal(u, w):
    """(loglik per mode, params) of the truncated normal in u."""
    def nll(p):
        mu, sig = p[0], np.exp(p[1])
        z = (u - mu) / sig
        norm = _log_phi_diff(-mu / sig, (w - mu) / sig)
        return np.mean(0.5 * z * z) + p[1] + 0.5 * np.log(2 * np.pi) + norm
    s = mle_ir_exponent(np.exp(u), (1.0, np.exp(w))).beta + 1
    sig_pl = 3 * w                    # near the power-law limit: slope μ/σ² = s
    starts = [(u.mean(), np.log(max(u.std(), 1e-3))), (s * sig_pl ** 2, np.log(sig_pl))]
    best = min((optimize.minimize(nll, x0, method="Nelder-Mead",
                                  options={"xatol": 1e-7, "fatol": 1e-12, "maxiter": 4000})
                for x0 in starts), key=lambda r: r.fun)
    mu, sig = best.x[0], np.exp(best.x[1])
    return _pointwise_lognormal(u, w, mu, sig), {"mu_ln_lambda_over_lo": mu, "sigma": sig}


def _pointwise_lognormal(u, w, mu, sig):
    z = (u - mu) / sig
    return -0.5 * z * z - np.log(sig) - 0.5 * np.log(2 * np.pi) - _log_phi_diff(-mu / sig, (w - mu) / sig)


def _exponential(u, w, hi):
    """κ in x = λ/hi units; the log-likelihood is concave in κ (an exponential family in x)."""
    x, xa = np.exp(u - w), np.exp(-w)

    def pointwise(k):
        return -k * x + np.log(x) - _log_int_exp(k, xa, 1.0)
    res = optimize.minimize_scalar(lambda z: -pointwise(10 * np.sinh(z)).mean(),
                                   bounds=(-12.0, 12.0), method="bounded",
                                   options={"xatol": 1e-10})
    k = 10 * np.sinh(res.x)
    return pointwise(k), {"kappa": k / hi}


def _stretched(u, w, hi, s_pl):
    """b > 0, c: p(x) ∝ x^(b−1) e^{−c x^b}; c = 0 is the power law with β = b − 1."""
    x_log, xa = u - w, np.exp(-w)

    def pointwise(p):
        b, c = np.exp(p[0]), p[1]
        xb = np.exp(b * x_log)
        return b * x_log - c * xb + np.log(b) - _log_int_exp(c, xa ** b, 1.0)
    starts = [(np.log(s_pl if s_pl > 0.02 else 0.05), 0.0), (np.log(0.5), 1.0)]
    best = min((optimize.minimize(lambda p: -pointwise(p).mean(), x0, method="Nelder-Mead",
                                  options={"xatol": 1e-8, "fatol": 1e-12, "maxiter": 4000})
                for x0 in starts), key=lambda r: r.fun)
    b, c = np.exp(best.x[0]), best.x[1]
    return pointwise(best.x), {"b": b, "c": c / hi ** b}


def compare_alternatives(rates, window=WINDOW) -> dict:
    """{name: Alternative} for the names in ALTERNATIVES (empty when the window holds fewer
    than gof.MIN_MODES rates)."""
    lo, hi = window
    r = in_window(rates, window)
    if len(r) < MIN_MODES:
        return {}
    u, w = np.log(r / lo), np.log(hi / lo)
    pl = mle_ir_exponent(r, window)
    s = pl.beta + 1
    lp_pl = np.log(_pl_density(u, s, w))
    fits = {"lognormal": _lognormal(u, w), "exponential": _exponential(u, w, hi),
            "stretched_exponential": _stretched(u, w, hi, s)}
    nested = {"lognormal": True, "exponential": False, "stretched_exponential": s > 0}
    return {name: _ratio(name, lp_pl, lp_alt, params, nested[name], tuple(window), r)
            for name, (lp_alt, params) in fits.items()}


def _pl_density(u, s, w):
    """p(u) ∝ e^{s u} on [0, w], normalised."""
    if abs(s * w) < 1e-12:
        return np.full_like(u, 1 / w)
    return np.exp(s * u - _log_int_exp(-s, 0.0, w))


def _ratio(name, lp_pl, lp_alt, params, nested, window, rates) -> Alternative:
    l = lp_pl - lp_alt
    if nested and l.sum() > 0:        # the optimiser stopped short of the power-law limit
        l, lp_alt = np.zeros_like(l), lp_pl
    n, sd = len(l), l.std()
    R = float(l.sum() / (sd * np.sqrt(n))) if sd > 0 else 0.0
    p = (stats.chi2.sf(-2 * l.sum(), 1) if nested else special.erfc(abs(R) / np.sqrt(2)))
    return Alternative(name, R, float(p), bool(nested), float(l.sum()),
                       {k: float(v) for k, v in params.items()}, float(lp_pl.sum()),
                       float(lp_alt.sum()), n, window, l, rates)
