"""Is the spectrum a power law inside the window? A Kolmogorov–Smirnov test of the bounded
power law p(λ) ∝ λ^β on [lo, hi], with a Monte-Carlo p-value (Clauset, Shalizi & Newman
2009 §4; Deluca & Corral 2013 for the doubly truncated law with fixed bounds).

- β is the maximum-likelihood exponent of the in-window rates (`fits.mle_ir_exponent`).
- ks = sup |F_emp − F_fit| over the n in-window rates (both one-sided gaps at each point).
- p: `n_sims` synthetic sets of n rates are drawn from the fitted law, each refitted by the
  same MLE and tested against its own fit; p = (1 + #{ks_sim ≥ ks}) / (1 + n_sims). The
  refit is what makes p honest: a law fitted to its data sits closer to them than the true
  one would.
- The bounds are the analysis window, not fitted: the question asked is "a power law over
  this window?", the one the paper's β presumes.

Caveat: the test takes the n modes as independent draws. Modes of one token, and of
neighbouring tokens, are correlated, and with 10⁴…10⁵ modes any real spectrum is rejected at
some level; ks (how far, as a probability) and the local exponent at the window's ends
(`window.local_exponent`) say how far from a power law it is.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis._plot import axes_or_new
from analysis.fit.fits import WINDOW, cdf_u, in_window, inverse_cdf_u, mle_ir_exponent, solve_s

MIN_MODES = 10               # fewer in the window: nothing is fitted or tested
CHUNK = 2 ** 22              # values per Monte-Carlo batch (32 MiB of float64)


@dataclass
class PowerLawGOF:
    """KS goodness of fit of the bounded power law on `window`, Monte-Carlo p."""
    beta: float                # MLE of the in-window density exponent
    se: float                  # its Fisher standard error (modes taken as independent)
    ks: float                  # KS distance of the in-window rates to the fit
    p_value: float             # Monte-Carlo p (module docstring)
    n: int                     # rates in the window
    n_sims: int
    window: tuple
    seed: int = 0
    sims_ks: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    rates: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)

    @property
    def fitted(self) -> bool:
        return self.n >= MIN_MODES

    @property
    def method(self) -> str:
        return (f"KS distance of the {self.n} rates in [{self.window[0]:g}, {self.window[1]:g}] "
                f"to the maximum-likelihood bounded power law λ^β on that window; p from "
                f"{self.n_sims} synthetic sets of {self.n} rates drawn from the fit, each refitted "
                f"(seed {self.seed}); modes taken as independent")

    def describe(self) -> str:
        if not self.fitted:
            return f"power-law GOF: {self.n} rates in the window, fewer than {MIN_MODES}: not tested"
        return (f"power law on the window: MLE β = {self.beta:+.3f}, KS = {self.ks:.4f}, "
                f"p = {self.p_value:.3f} ({self.n_sims} Monte-Carlo sets, {self.n:,} modes)")

    def to_dict(self) -> dict:
        return {"beta": self.beta, "se": self.se, "ks": self.ks, "p_value": self.p_value,
                "n": self.n, "n_sims": self.n_sims, "window": list(self.window),
                "seed": self.seed, "method": self.method}

    def plot(self, ax=None, color="C0"):
        """Empirical CDF of the in-window rates against the fitted law's."""
        ax = axes_or_new(ax)
        lo, hi = self.window
        if self.fitted:
            r, w = self.rates, np.log(hi / lo)
            ax.semilogx(r, np.arange(1, self.n + 1) / self.n, "-", color=color, lw=1,
                        label="in-window rates")
            xx = np.geomspace(lo, hi, 200)
            ax.semilogx(xx, cdf_u(np.log(xx / lo), self.beta + 1, w), "k--", lw=0.8,
                        label=f"power law β = {self.beta:+.3f}")
        ax.set_xlabel("relaxation rate λ (per block)")
        ax.set_ylabel("F(λ) within the window")
        ax.set_title(f"KS = {self.ks:.4f}, p = {self.p_value:.3f}" if self.fitted
                     else "no power law fitted: too few modes", fontsize=9)
        if self.fitted:
            ax.legend(fontsize=8)
        return ax


def ks_distance(u_sorted, s, w) -> np.ndarray:
    """sup |F_emp − F| of sorted samples u (…, n) against p(u) ∝ e^{s u} on [0, w]; s (…,)."""
    u = np.atleast_2d(u_sorted)
    s = np.broadcast_to(np.asarray(s, np.float64), u.shape[:1])
    n = u.shape[-1]
    F = np.stack([cdf_u(ui, si, w) for ui, si in zip(u, s)])
    i = np.arange(1, n + 1)
    return np.maximum((i / n - F).max(-1), (F - (i - 1) / n).max(-1))


def power_law_gof(rates, window=WINDOW, n_sims=500, seed=0) -> PowerLawGOF:
    """KS test of the bounded power law on `window` (module docstring)."""
    lo, hi = window
    r = in_window(rates, window)
    n, w = len(r), np.log(hi / lo)
    if n < MIN_MODES:
        return PowerLawGOF(np.nan, np.nan, np.nan, np.nan, n, n_sims, tuple(window), seed, rates=r)
    mle = mle_ir_exponent(r, window)
    s = mle.beta + 1
    ks = float(ks_distance(np.log(r / lo), s, w)[0])
    sims = _simulated_ks(n, s, w, n_sims, np.random.default_rng(seed))
    p = (1 + np.count_nonzero(sims >= ks)) / (1 + n_sims)
    return PowerLawGOF(mle.beta, mle.se, ks, float(p), n, n_sims, tuple(window), seed, sims, r)


def _simulated_ks(n, s, w, n_sims, rng) -> np.ndarray:
    """(n_sims,) KS distances of sets of n draws from p(u) ∝ e^{s u}, each against its refit."""
    out = np.empty(n_sims)
    per = max(1, CHUNK // n)
    for b0 in range(0, n_sims, per):
        c = min(per, n_sims - b0)
        # sorted uniforms from normalised cumulative exponential spacings: no sort needed
        e = np.cumsum(rng.exponential(size=(c, n + 1)), axis=1)
        q = e[:, :n] / e[:, n:]                                        # (c, n) sorted in (0, 1)
        u = inverse_cdf_u(q, s, w)
        s_fit = solve_s(u.mean(1), w)                                  # (c,) the refits
        out[b0:b0 + c] = ks_distance(u, s_fit, w)
    return out
