"""Token memory (a store swept with `memory:`): how far back a block looks, and whether its
memory decays exponentially (finite memory) or as a power law (scale-free).

- **The profile** m(k) = ⟨m_t(k) / m_t(0)⟩_t of one layer, m_t(k) = ‖J_{t,t−k}‖_F² at the
  sampled output tokens t ≥ k of every sequence; its CI resamples the tokens as β's bootstrap
  does (resampling.py: whole sequences with ≥ 20 of them, else circular blocks of the
  sampled tokens), each replicate the ratio of resampled sums, so a token enters lag k
  only when t ≥ k.
- **The fits**, a weighted least-squares fit of ln m(k) over the lags of a window
  (`memory_window`, default 1..lags): exponential ln m = a − k/ξ, and power law
  ln m = a − α ln k. Weights 1/Var(ln m(k)) from the bootstrap replicates; each law's χ²
  (neighbouring lags are correlated, so its p-value is indicative), the law of smaller χ²
  preferred, and how often each replicate prefers it. ξ and α get percentile CIs from
  refitting every replicate profile with the same weights, stretched as every interval is.
- **The intrinsic kernel** of a layer with a learned decay (Mamba-style, gated delta rule),
  K_A(k) = ⟨e^{−Δ_t·λ_A·k}⟩ over its tokens and modes (stored Δ and exp(A_log)): the
  recurrence's input-history memory, drawn beside the complete block's.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from analysis._plot import axes_or_new
from analysis.fit.resampling import Resampling, difference_interval, resampling_for, verdict
from analysis.io.settings import Settings
from analysis.spectrum.observables import memory_kernel

LAWS = ("exponential", "power law")


@dataclass
class MemoryProfile:
    """m(k) of one layer with its CI (module docstring)."""
    model: str
    layer: int
    kind: str
    value: np.ndarray                 # (K+1,) m(k), m(0) = 1
    lo: np.ndarray
    hi: np.ndarray
    n_tokens: np.ndarray              # (K+1,) sampled tokens with t >= k
    estimator: str                    # "exact" | "hutchinson (p Rademacher probes)"
    every: int
    unit: str                         # what a replicate resampled
    level: float
    reps: np.ndarray = field(repr=False)              # (n_boot, K+1) replicate profiles
    resampling: Resampling | None = field(repr=False, default=None)
    intrinsic: np.ndarray | None = None               # (K+1,) K_A(k) of a layer with a decay

    @property
    def lags(self) -> np.ndarray:
        return np.arange(len(self.value))

    def plot(self, ax=None, view="loglog", color=None, label=None):
        """m(k) with its band; view "loglog" (k >= 1) or "linlog"; K_A(k) dashed."""
        ax = axes_or_new(ax)
        k = self.lags if view == "linlog" else self.lags[1:]
        sl = slice(0, None) if view == "linlog" else slice(1, None)
        label = label or f"layer {self.layer}"
        line, = ax.plot(k, self.value[sl], "o-", ms=3, color=color, label=label)
        ax.fill_between(k, self.lo[sl], self.hi[sl], color=line.get_color(), alpha=0.25, lw=0)
        if self.intrinsic is not None:
            ax.plot(k, self.intrinsic[sl], "--", color=line.get_color(), lw=1,
                    label=f"{label}: K_A(k)")
        ax.set_yscale("log")
        if view == "loglog":
            ax.set_xscale("log")
        ax.set_xlabel("lag k (tokens)")
        ax.set_ylabel("m(k) = ⟨‖J_{t,t−k}‖²_F / ‖J_tt‖²_F⟩")
        return ax


@dataclass
class MemoryFit:
    """Both laws fitted to one profile over `window` (module docstring)."""
    layer: int
    window: tuple                     # (k_lo, k_hi)
    n_lags: int
    xi: float                         # exponential: memory length in tokens (inf: no decay)
    xi_lo: float
    xi_hi: float
    alpha: float                      # power law exponent
    alpha_lo: float
    alpha_hi: float
    chi2: dict                        # {law: χ²}
    dof: int
    p: dict                           # {law: χ² p-value (indicative)}
    preferred: str                    # the law of smaller χ²
    share: float                      # replicates that prefer it too
    unit: str
    level: float
    reps: dict = field(repr=False, default_factory=dict)     # {"xi"|"alpha": replicates}
    stretch: float = 1.0
    profile: MemoryProfile | None = field(repr=False, default=None)
    method: str = ("weighted least squares of ln m(k) (weights 1/Var ln m(k) of the bootstrap "
                   "replicates); CIs by refitting every replicate")

    def to_dict(self) -> dict:
        return {"layer": self.layer, "window": list(self.window), "n_lags": self.n_lags,
                "xi": self.xi, "xi_ci": [self.xi_lo, self.xi_hi], "alpha": self.alpha,
                "alpha_ci": [self.alpha_lo, self.alpha_hi], "chi2": self.chi2, "dof": self.dof,
                "p": self.p, "preferred": self.preferred, "preferred_share": self.share,
                "unit": self.unit, "level": self.level, "method": self.method}

    def plot(self, ax=None):
        """The profile on log-log axes with both fitted laws over the window."""
        ax = self.profile.plot(ax, "loglog") if self.profile is not None else axes_or_new(ax)
        k = np.linspace(self.window[0], self.window[1], 100)
        a_exp, a_pow = self._intercepts()
        ax.plot(k, np.exp(a_exp - k / self.xi), ":", color="C3", label=f"e^(−k/ξ), ξ = {self.xi:.3g}")
        ax.plot(k, np.exp(a_pow) * k ** -self.alpha, "-.", color="C2", label=f"k^(−α), α = {self.alpha:.3g}")
        ax.legend(fontsize=7)
        return ax

    def _intercepts(self):
        p = self.profile
        ks, y, w = _window(p.lags, p.value, p.reps, self.window)
        return (_wls(ks, y, w)[0], _wls(np.log(ks), y, w)[0]) if len(ks) > 1 else (0.0, 0.0)


def memory_profile(st, layer, settings: Settings | None = None) -> MemoryProfile:
    """The normalised lag profile of `layer` of Store `st` (module docstring)."""
    settings = settings or Settings()
    meta = st.memory_meta
    K = meta["lags"]
    ratios, seqs = [], []
    for q in range(st.n_seqs):
        m = st.memory(layer, q)[settings.skip_positions:]                    # (L, K+1)
        ok = np.isfinite(m[:, 0]) & (m[:, 0] > 0)
        ratios.append(m[ok] / m[ok, :1])
        seqs.append(np.full(int(ok.sum()), q))
    r = np.concatenate(ratios) if ratios else np.zeros((0, K + 1))
    seq = np.concatenate(seqs)
    if not len(r):
        from analysis.io.store import StoreError

        raise StoreError(f"model {st.name!r} layer {layer}: no token-memory profile written yet — "
                         f"finish the sweep (`tdos sweep --resume`)")
    have = np.isfinite(r)
    x = np.where(have, r, 0.0)
    n = have.sum(0)
    value = x.sum(0) / np.maximum(n, 1)
    influence = ((x - value * have) / np.maximum(value, 1e-300)).sum(1)
    plan = resampling_for(influence, seq)
    sums = plan.replicate_sums(np.concatenate([x, have.astype(float)], 1), settings.n_boot,
                               settings.seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        reps = sums[:, : K + 1] / sums[:, K + 1:]
    lo, hi = np.array([plan.interval(value[k], reps[:, k], settings.level) for k in range(K + 1)]).T
    return MemoryProfile(st.name, int(layer), st.layer_kind(layer), value, lo, hi, n,
                         meta["estimator"], meta["every"], plan.unit, settings.level, reps, plan,
                         _intrinsic(st, layer, K, settings.skip_positions))


def _intrinsic(st, layer, K, skip) -> np.ndarray | None:
    """K_A(k) = ⟨e^{−Δ_t λ_A k}⟩ over the tokens and modes of a layer with a decay, else None."""
    if layer not in st.ssm_layers:
        return None
    k = np.arange(K + 1, dtype=np.float64)
    kernels = [memory_kernel(st.effective_rates(layer, q)[skip:].reshape(-1), t=k)
               for q in range(st.n_seqs)]                       # one sequence's rates at a time
    n = sum(kern.n_modes for kern in kernels)
    return sum(kern.K * kern.n_modes for kern in kernels) / n if n else None


def _window(lags, value, reps, window):
    """(k, ln m(k), weights) of the lags inside the window with m > 0 and a replicate spread."""
    sel = (lags >= window[0]) & (lags <= window[1]) & (value > 0) & np.isfinite(value)
    with np.errstate(invalid="ignore", divide="ignore"):
        var = np.nanvar(np.log(reps[:, sel]), axis=0)
    good = np.isfinite(var) & (var > 0)
    ks = lags[sel][good]
    return ks.astype(float), np.log(value[sel][good]), 1.0 / var[good]


def _wls(x, y, w):
    """(intercept, slope, χ²) of y on x with weights w."""
    X = np.stack([np.ones_like(x), x], 1)
    sw = np.sqrt(w)
    coef, *_ = np.linalg.lstsq(X * sw[:, None], y * sw, rcond=None)
    return coef[0], coef[1], float((w * (y - X @ coef) ** 2).sum())


def _params(prof, ks, w):
    """(ξ, α, χ²_exp, χ²_pow) of one profile at lags `ks` with the point profile's weights."""
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.log(prof[ks.astype(int)])
    if len(ks) < 2 or not np.isfinite(y).all():
        return np.nan, np.nan, np.nan, np.nan
    _, b_exp, c_exp = _wls(ks, y, w)
    _, b_pow, c_pow = _wls(np.log(ks), y, w)
    xi = -1.0 / b_exp if b_exp < 0 else np.inf
    return xi, -b_pow, c_exp, c_pow


def fit_memory(profile: MemoryProfile, window=None, settings: Settings | None = None) -> MemoryFit:
    """Both laws on `profile` over `window` ((k_lo, k_hi); default the settings' memory_window,
    else 1..lags)."""
    settings = settings or Settings()
    K = len(profile.value) - 1
    window = tuple(window or settings.memory_window or (1, K))
    window = (max(1, window[0]), min(K, window[1]))
    ks, _, w = _window(profile.lags, profile.value, profile.reps, window)
    xi, alpha, c_exp, c_pow = _params(profile.value, ks, w)
    reps = np.array([_params(r, ks, w) for r in profile.reps])                # (n_boot, 4)
    plan, level = profile.resampling, profile.level

    def ci(point, col):
        r = reps[:, col]
        r = r[np.isfinite(r)]
        return plan.interval(point, r, level) if np.isfinite(point) and len(r) > 1 else (np.nan, np.nan)
    dof = max(len(ks) - 2, 0)
    chi2 = {"exponential": c_exp, "power law": c_pow}
    p = {law: float(stats.chi2.sf(c, dof)) if dof and np.isfinite(c) else np.nan
         for law, c in chi2.items()}
    preferred = min(LAWS, key=lambda law: chi2[law] if np.isfinite(chi2[law]) else np.inf)
    col = 2 if preferred == "exponential" else 3
    other = 3 if col == 2 else 2
    ok = np.isfinite(reps[:, col]) & np.isfinite(reps[:, other])
    share = float((reps[ok, col] <= reps[ok, other]).mean()) if ok.any() else np.nan
    return MemoryFit(profile.layer, window, len(ks), xi, *ci(xi, 0), alpha, *ci(alpha, 1), chi2,
                     dof, p, preferred, share, profile.unit, level,
                     {"xi": reps[:, 0], "alpha": reps[:, 1]}, plan.stretch(level), profile)


def delta(a: MemoryFit, b: MemoryFit, what: str, level: float) -> tuple:
    """(a − b, lo, hi) of "xi" or "alpha", each side's replicates drawn independently."""
    va, vb = getattr(a, what), getattr(b, what)
    return difference_interval(va, a.reps[what], a.stretch, vb, b.reps[what], b.stretch, level)


@dataclass
class MemoryStudy:
    """Every layer's profile and fits of one model."""
    model: str
    meta: dict                      # lags, probes, every, estimator
    fits: dict                      # {layer: MemoryFit}

    def to_dict(self) -> dict:
        return {"settings": self.meta, "profile": "m(k) = ⟨m_t(k)/m_t(0)⟩ over sampled tokens t ≥ k",
                "layers": {ly: {**f.to_dict(), "profile": f.profile.value.tolist(),
                                "profile_ci": [f.profile.lo.tolist(), f.profile.hi.tolist()],
                                "intrinsic_K_A": None if f.profile.intrinsic is None
                                else f.profile.intrinsic.tolist()}
                           for ly, f in self.fits.items()}}


def memory_study(st, settings) -> MemoryStudy:
    return MemoryStudy(st.name, st.memory_meta,
                       {ly: fit_memory(memory_profile(st, ly, settings), settings=settings)
                        for ly in st.layers})


@dataclass
class MemoryDelta:
    a: str
    b: str
    layer_a: int
    layer_b: int
    what: str            # "alpha" | "xi"
    delta: float
    lo: float
    hi: float
    level: float
    preferred: tuple     # each side's preferred law

    @property
    def verdict(self) -> str:
        return verdict(self.lo, self.hi, self.level)

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "layer_a": self.layer_a, "layer_b": self.layer_b,
                "what": self.what, "delta": self.delta, "ci": [self.lo, self.hi],
                "level": self.level, "verdict": self.verdict, "preferred": list(self.preferred)}


def compare_memory(studies: dict, layers: dict, level: float) -> list:
    """Δα and Δξ of every pair at their representative layers ({name: layer})."""
    names, out = list(studies), []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            fa, fb = studies[a].fits[layers[a]], studies[b].fits[layers[b]]
            for what in ("alpha", "xi"):
                out.append(MemoryDelta(a, b, layers[a], layers[b], what,
                                       *delta(fa, fb, what, level), level,
                                       (fa.preferred, fb.preferred)))
    return out
