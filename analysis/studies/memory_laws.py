"""The laws a token-memory profile (memory.py `MemoryProfile`) decays by, and whether any
fits (docs/memory.md).

- **The window** of lags starts past the layer's causal convolution (k ≥ its width, recorded
  by the sweep): below it token t reaches back through the convolution's local taps, not
  through the layer's memory. `analysis.memory_window` overrides it.
- **The fits** (analysis/fit/lag_laws.py): exponential, power law and broken power law by
  generalised least squares of ln m(k) with the lags' covariance (memory.py) (χ² = rᵀ C⁻¹ r, the Mahalanobis
  norm), so point estimates do not depend on the seed. BIC picks the law; each law's χ² p
  is printed; "neither law fits" when the picked law's p < 0.01. CIs refit every replicate
  with the same covariance; the replicates' seed (blocks) derives from the model
  (`named_seed`).
- **The verdict needs the replicates' agreement**: the share of replicates whose BIC picks the
  same law is reported, and below `SHARE_MIN` (80 %) no law is named ("no law: the
  replicates split"): only m(k) with its CIs is printed, and no parameter is compared.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis._plot import axes_or_new
from analysis.fit.lag_laws import LAWS, N_PARAMS, P_REJECT, bic, curve, fit_laws, gof_p
from sweep.format.settings import Settings

NEITHER = "neither law fits"
SPLIT = "no law: the replicates split"
SHARE_MIN = 0.8       # replicates that must pick the preferred law for a law verdict


@dataclass
class LawFit:
    """One law on one profile: point estimates from the data, CIs from the replicates."""
    law: str
    params: dict                      # {"xi"} | {"alpha"} | {"alpha_1", "alpha_2", "k_break"}
    ci: dict                          # {name: (lo, hi)}
    chi2: float
    dof: int                          # lags − parameters
    p: float                          # P(χ²_dof > χ²), χ² with the lags' covariance
    bic: float                        # χ² + parameters · ln(lags)
    intercept: float
    reps: dict = field(repr=False, default_factory=dict)    # {name: (n_boot,) replicates}

    @property
    def rejected(self) -> bool:
        return bool(self.p < P_REJECT)

    def to_dict(self) -> dict:
        return {"params": self.params, "ci": {n: list(c) for n, c in self.ci.items()},
                "chi2": self.chi2, "dof": self.dof, "p": self.p, "bic": self.bic}


@dataclass
class MemoryFit:
    """The three laws fitted to one profile over `window` (module docstring)."""
    layer: int
    window: tuple                     # (k_lo, k_hi)
    window_rule: str                  # why the window starts where it does
    n_lags: int
    laws: dict                        # {law: LawFit}
    preferred: str                    # the law of smallest BIC
    verdict: str                      # "fits" | NEITHER (p < P_REJECT) | SPLIT (share < SHARE_MIN)
    share: float                      # replicates whose BIC picks the same law
    unit: str
    level: float
    profile: object = field(repr=False, default=None)   # memory.MemoryProfile
    method: str = ("generalised least squares of ln m(k) with the lags' covariance (variances "
                   "from the resampling units, correlation across tokens; χ² = rᵀC⁻¹r); law "
                   "chosen by BIC, named only when ≥ 80 % of replicates choose it; CIs by "
                   "refitting every replicate with the same covariance")

    @property
    def dof(self) -> float:
        """The t degrees of freedom of the parameters' intervals (the resampling plan's)."""
        plan = self.profile.resampling if self.profile is not None else None
        return float(plan.dof) if plan is not None else np.inf

    @property
    def law(self) -> str | None:
        """The law the data support: the preferred one when it fits and the replicates agree."""
        return self.preferred if self.verdict == "fits" else None

    @property
    def split(self) -> bool:
        """The replicates split between laws: no law and no parameter is read."""
        return self.verdict == SPLIT

    def _param(self, law, name, end=""):
        f = self.laws.get(law)
        if f is None:
            return np.nan
        return f.params[name] if not end else f.ci[name][0 if end == "lo" else 1]

    xi = property(lambda s: s._param("exponential", "xi"))
    xi_lo = property(lambda s: s._param("exponential", "xi", "lo"))
    xi_hi = property(lambda s: s._param("exponential", "xi", "hi"))
    alpha = property(lambda s: s._param("power law", "alpha"))
    alpha_lo = property(lambda s: s._param("power law", "alpha", "lo"))
    alpha_hi = property(lambda s: s._param("power law", "alpha", "hi"))

    @property
    def chi2(self) -> dict:
        return {law: f.chi2 for law, f in self.laws.items()}

    @property
    def p(self) -> dict:
        return {law: f.p for law, f in self.laws.items()}

    def to_dict(self) -> dict:
        return {"layer": self.layer, "window": list(self.window), "window_rule": self.window_rule,
                "n_lags": self.n_lags, "laws": {law: f.to_dict() for law, f in self.laws.items()},
                "preferred": self.preferred, "criterion": "BIC", "verdict": self.verdict,
                "preferred_share": self.share, "share_min": SHARE_MIN, "law": self.law,
                "p_reject": P_REJECT, "unit": self.unit,
                "level": self.level, "method": self.method}

    def plot(self, ax=None):
        """The profile on log-log axes with every fitted law over the window."""
        ax = self.profile.plot(ax, "loglog") if self.profile is not None else axes_or_new(ax)
        k = np.geomspace(self.window[0], self.window[1], 100)
        for (law, f), style in zip(self.laws.items(), (":", "-.", "--")):
            ax.plot(k, np.exp(curve(law, f.intercept, f.params, k)), style, label=f"{law}, p = {f.p:.2g}")
        ax.legend(fontsize=7)
        return ax


def default_window(profile, settings: Settings) -> tuple:
    """((k_lo, k_hi), rule): analysis.memory_window, else from the convolution's width to K."""
    K = len(profile.value) - 1
    if settings.memory_window:
        return tuple(settings.memory_window), "analysis.memory_window"
    w = profile.conv_width
    if w is None:
        return (1, K), "from k = 1: this store predates the recording of convolution widths"
    if w > 1:
        return (w, K), f"from k = {w}, past the causal convolution's {w} taps"
    return (1, K), "from k = 1: no causal convolution"


def _window(profile, window):
    """(k, ln m(k), covariance) of the lags inside the window with m > 0 and a positive variance."""
    lags, value, var = profile.lags, profile.value, profile.log_var
    sel = (lags >= window[0]) & (lags <= window[1]) & (value > 0) & np.isfinite(value) \
        & np.isfinite(var) & (var > 0)
    return lags[sel].astype(float), np.log(value[sel]), profile.log_cov[np.ix_(sel, sel)]


def fit_memory(profile, window=None, settings: Settings | None = None) -> MemoryFit:
    """Every law on `profile` over `window` ((k_lo, k_hi); default `default_window`)."""
    settings = settings or Settings()
    K = len(profile.value) - 1
    window, rule = (tuple(window), "asked for") if window else default_window(profile, settings)
    window = (max(1, int(window[0])), min(K, int(window[1])))
    ks, y, cov = _window(profile, window)
    n = len(ks)
    point = fit_laws(ks, y[None], cov)
    with np.errstate(invalid="ignore", divide="ignore"):
        rep_y = np.log(profile.reps[:, ks.astype(int)])                     # (B, n)
    reps = fit_laws(ks, rep_y, cov)
    plan, level = profile.resampling, profile.level
    laws = {law: _law_fit(point[law], reps[law], ks, plan, level) for law in LAWS if law in point}
    scores = {law: f.bic for law, f in laws.items() if np.isfinite(f.bic)}
    preferred = min(scores, key=scores.get) if scores else "none"
    rep_bic = np.stack([bic(reps[law].chi2, law, n) for law in laws]) if laws else np.zeros((0, 0))
    ok = np.isfinite(rep_bic).all(0) if laws else np.zeros(0, bool)
    picks = np.array(list(laws))[np.argmin(rep_bic[:, ok], 0)] if ok.any() else np.array([])
    share = float((picks == preferred).mean()) if len(picks) else np.nan
    verdict = NEITHER if preferred == "none" or laws[preferred].rejected \
        else "fits" if share >= SHARE_MIN else SPLIT
    return MemoryFit(profile.layer, window, rule, n, laws, preferred, verdict, share,
                     profile.unit, level, profile)


def _law_fit(point, reps, ks, plan, level) -> LawFit:
    """LawFit of one law from its point and replicate LawBatch at lags `ks`."""
    params = {name: float(v[0]) for name, v in point.params.items()}
    ci = {name: _param_interval(name, params[name], v, ks, plan, level)
          for name, v in reps.params.items()}
    n, chi2 = len(ks), float(point.chi2[0])
    return LawFit(point.law, params, ci, chi2, n - N_PARAMS[point.law], gof_p(chi2, point.law, n),
                  float(bic(chi2, point.law, n)), float(point.intercept[0]), dict(reps.params))


def _param_interval(name, point, reps, ks, plan, level) -> tuple:
    """The plan's interval of one parameter; ξ and k_b are positive, so theirs is taken on the
    log scale, and k_b's kept within the lags a break can lie at."""
    r = reps[np.isfinite(reps)]
    if not np.isfinite(point) or len(r) < 2:
        return (np.nan, np.nan)
    if name not in ("xi", "k_break"):
        return plan.interval(point, r, level)
    lo, hi = np.exp(plan.interval(np.log(point), np.log(r[r > 0]), level))
    return (float(max(lo, ks[1])), float(min(hi, ks[-2]))) if name == "k_break" \
        else (float(lo), float(hi))


