"""Token memory (a store swept with `memory:`): how far back a block looks, and which law its
memory decays by, if any (docs/memory.md). The laws and their verdicts: memory_laws.py.

- **The profile** m(k) = ⟨m_t(k) / m_t(0)⟩_t of one layer, m_t(k) = ‖J_{t,t−k}‖_F² at the
  sampled output tokens t ≥ k of every sequence, a ratio of sums over tokens. Its variance
  at each lag is the resampling plan's closed-form variance of the linearised sums
  (`Resampling.sum_variance`: the spread across tokens, pooled into the plan's units, whole
  sequences or circular blocks): from the data alone, no seed. Its CI resamples the tokens
  (resampling.py), each replicate a ratio of resampled sums, the interval taken on ln m(k),
  so it never goes below 0.
- **The lags' covariance** C(k, k′) = √Var ln m(k) · ρ(k, k′) · √Var ln m(k′): the variances
  are the plan's (above), the correlation ρ that of the tokens' linearised contributions to
  ln m(k) and ln m(k′) (the same tokens enter every lag, and neighbouring lags move together),
  shrunk toward the identity by n_lags/(n_lags + N) so that it stays invertible. Per-token
  rather than per-unit: a jackknife over S sequences gives a covariance of rank S − 1, too
  few for ~30 lags. From the data alone: no seed.
- **The intrinsic kernel** of a layer with a learned decay (Mamba-style, gated delta rule) squared, as m(k) is: K_A²(k) =
  ⟨e^{−2Δ_t·λ_A·k}⟩ over its tokens and modes (stored Δ and exp(A_log)), 1 at k = 0 as m(0).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from analysis._plot import axes_or_new
from analysis.fit.lag_laws import LAWS, P_REJECT
from analysis.fit.resampling import Resampling, difference_interval, named_seed, resampling_for
from analysis.fit.resampling import verdict as ci_verdict
from analysis.spectrum.observables import memory_kernel
from analysis.studies.memory_laws import NEITHER, SHARE_MIN, SPLIT, fit_memory
from sweep.format.settings import Settings

@dataclass
class MemoryProfile:
    """m(k) of one layer with its variance and CI (module docstring)."""
    model: str
    layer: int
    kind: str
    value: np.ndarray                 # (K+1,) m(k), m(0) = 1
    lo: np.ndarray                    # (K+1,) CI, from the replicates' ln m(k): >= 0
    hi: np.ndarray
    log_var: np.ndarray               # (K+1,) Var ln m(k) from the data
    log_cov: np.ndarray               # (K+1, K+1) Cov(ln m(k), ln m(k′)), the fits' χ² (docstring)
    n_tokens: np.ndarray              # (K+1,) sampled tokens with t >= k
    estimator: str                    # "exact" | "hutchinson (p Rademacher probes)"
    every: int
    unit: str                         # what a replicate resampled
    level: float
    conv_width: int | None            # taps of the layer's causal convolution; None: not recorded
    reps: np.ndarray = field(repr=False)              # (n_boot, K+1) replicate profiles
    resampling: Resampling | None = field(repr=False, default=None)
    intrinsic: np.ndarray | None = None               # (K+1,) K_A²(k) of a layer with a decay

    @property
    def lags(self) -> np.ndarray:
        return np.arange(len(self.value))

    def plot(self, ax=None, view="loglog", color=None, label=None):
        """m(k) with its band; view "loglog" (k >= 1) or "linlog"; K_A²(k) dashed."""
        ax = axes_or_new(ax)
        sl = slice(0, None) if view == "linlog" else slice(1, None)
        k = self.lags[sl]
        label = label or f"layer {self.layer}"
        line, = ax.plot(k, self.value[sl], "o-", ms=3, color=color, label=label)
        ax.fill_between(k, self.lo[sl], self.hi[sl], color=line.get_color(), alpha=0.25, lw=0)
        if self.intrinsic is not None:
            ax.plot(k, self.intrinsic[sl], "--", color=line.get_color(), lw=1,
                    label=f"{label}: K_A²(k), SSM modes alone")
        ax.set_yscale("log")
        if view == "loglog":
            ax.set_xscale("log")
        ax.set_xlabel("lag k (tokens)")
        ax.set_ylabel("m(k) = ⟨‖J_{t,t−k}‖²_F / ‖J_tt‖²_F⟩")
        return ax


def memory_profile(st, layer, settings: Settings | None = None, seed: int | None = None) -> MemoryProfile:
    """The normalised lag profile of `layer` of Store `st` (module docstring); `seed` of the
    replicates, default the model's own (`model_seed`)."""
    settings = settings or Settings()
    meta = st.memory_meta
    K = meta["lags"]
    ratios, seqs = [], []
    for q in range(st.n_seqs):
        m = st.memory(layer, q)[settings.skip_positions:]                    # (L, K+1)
        ok = np.isfinite(m[:, 0]) & (m[:, 0] > 0)
        ratios.append(m[ok] / m[ok, :1])
        seqs.append(np.full(int(ok.sum()), q))
    r = np.concatenate(ratios) if ratios else np.zeros((0, K + 1))          # (N, K+1)
    seq = np.concatenate(seqs)
    if not len(r):
        from analysis.io.store import StoreError

        raise StoreError(f"model {st.name!r} layer {layer}: no token-memory profile written yet — "
                         f"finish the sweep (`tdos sweep --resume`)")
    have = np.isfinite(r)
    x = np.where(have, r, 0.0)
    n = have.sum(0)
    value = x.sum(0) / np.maximum(n, 1)
    # each token's linearised contribution to the ratio of sums at every lag
    infl = x - value * have                                                 # (N, K+1)
    plan = resampling_for((infl / np.maximum(value, 1e-300)).sum(1), seq)
    with np.errstate(invalid="ignore", divide="ignore"):
        log_var = plan.sum_variance(infl) / (np.maximum(n, 1) * value) ** 2
        log_cov = _lag_covariance(infl / (np.maximum(n, 1) * value), log_var)
    sums = plan.replicate_sums(np.concatenate([x, have.astype(float)], 1), settings.n_boot,
                               model_seed(st, settings) if seed is None else seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        reps = sums[:, : K + 1] / sums[:, K + 1:]
    lo, hi = _log_interval(plan, value, reps, settings.level)
    return MemoryProfile(st.name, int(layer), st.layer_kind(layer), value, lo, hi, log_var, log_cov, n,
                         meta["estimator"], meta["every"], plan.unit, settings.level,
                         st.conv_width(layer), reps, plan,
                         _intrinsic(st, layer, K, settings.skip_positions))


def _lag_covariance(z, log_var) -> np.ndarray:
    """(K+1, K+1) the lags' covariance from the tokens' contributions z (N, K+1) to ln m(k):
    their correlation, shrunk toward the identity by (K+1)/(K+1 + N), scaled to log_var."""
    N, n = z.shape
    z = np.nan_to_num(z, nan=0.0, posinf=0.0, neginf=0.0)
    live = z.std(0) > 0
    corr = np.eye(n)
    if N > 1 and live.sum() > 1:
        corr[np.ix_(live, live)] = np.corrcoef(z[:, live].T)
    eps = n / (n + N)
    sd = np.sqrt(np.where(np.isfinite(log_var) & (log_var > 0), log_var, 0.0))
    return ((1 - eps) * corr + eps * np.eye(n)) * np.outer(sd, sd)


def model_seed(st, settings: Settings) -> int:
    """The replicates' seed of Store `st`'s model: its store and name with analysis.seed."""
    return named_seed(f"{st.creation_id}/{st.name}", settings.seed)


def _log_interval(plan, value, reps, level):
    """(lo, hi) (K+1,) each: the plan's interval of ln m(k), exponentiated (a replicate of 0
    maps to a lower bound of 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        lv, lr = np.log(value), np.log(np.maximum(reps, 1e-300))
    bounds = [plan.interval(lv[k], lr[:, k], level) if np.isfinite(lv[k]) else (np.nan, np.nan)
              for k in range(len(value))]
    return np.exp(np.array(bounds).T)


def _intrinsic(st, layer, K, skip) -> np.ndarray | None:
    """K_A²(k) = ⟨e^{−2Δ_t λ_A k}⟩ over the tokens and modes of a layer with a decay, else None."""
    if layer not in st.ssm_layers:
        return None
    t = 2.0 * np.arange(K + 1)                       # the squared amplitude: twice the time
    kernels = [memory_kernel(st.effective_rates(layer, q)[skip:].reshape(-1), t=t)
               for q in range(st.n_seqs)]                       # one sequence's rates at a time
    n = sum(kern.n_modes for kern in kernels)
    return sum(kern.K * kern.n_modes for kern in kernels) / n if n else None


@dataclass(frozen=True)
class MemoryStudy:
    """Every layer's profile and fits of one model; `RULES`, how a law verdict is read."""
    model: str
    meta: dict                      # lags, probes, every, estimator
    fits: dict                      # {layer: MemoryFit}
    RULES: ClassVar[dict] = {"laws": LAWS, "p_reject": P_REJECT, "share_min": SHARE_MIN,
                             "neither": NEITHER, "split": SPLIT}

    def to_dict(self) -> dict:
        return {"settings": self.meta, "profile": "m(k) = ⟨m_t(k)/m_t(0)⟩ over sampled tokens t ≥ k",
                "layers": {ly: {**f.to_dict(), "profile": f.profile.value.tolist(),
                                "profile_ci": [f.profile.lo.tolist(), f.profile.hi.tolist()],
                                "conv_width": f.profile.conv_width,
                                "intrinsic_K_A_squared": None if f.profile.intrinsic is None
                                else f.profile.intrinsic.tolist()}
                           for ly, f in self.fits.items()}}


def memory_study(st, settings) -> MemoryStudy:
    """Every swept layer of Store `st`, its replicates seeded by the model (`model_seed`), so a
    comparison draws the same ones as the model's own section."""
    return MemoryStudy(st.name, st.memory_meta,
                       {ly: fit_memory(memory_profile(st, ly, settings), settings=settings)
                        for ly in st.layers})


# the parameter a difference is taken of when both models prefer a law
COMPARED = {"exponential": "xi", "power law": "alpha", "broken power law": "alpha_2"}


@dataclass(frozen=True)
class MemoryDelta:
    """Δ of one parameter between two models, or why none is taken (`reason`)."""
    a: str
    b: str
    layer_a: int
    layer_b: int
    what: str | None     # "xi" | "alpha" | "alpha_2" | None (not compared)
    delta: float
    lo: float
    hi: float
    level: float
    preferred: tuple     # each side's preferred law
    reason: str = ""     # "laws differ" | "neither law fits <model>" when not compared
    p_adjusted: float = float("nan")   # Holm-adjusted within the report's family (compare.py)

    @property
    def verdict(self) -> str:
        return self.reason or ci_verdict(self.lo, self.hi, self.level, self.p_adjusted)

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "layer_a": self.layer_a, "layer_b": self.layer_b,
                "what": self.what, "delta": self.delta, "ci": [self.lo, self.hi],
                "level": self.level, "verdict": self.verdict, "preferred": list(self.preferred)}


def compare_memory(studies: dict, layers: dict, level: float) -> list:
    """One difference per pair at their representative layers ({name: layer}): of the
    parameter of the law both prefer (COMPARED), from each side's replicates
    (`difference_interval`); none when their laws differ, a side's law is rejected, or a
    side's replicates split."""
    names, out = list(studies), []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            fa, fb = studies[a].fits[layers[a]], studies[b].fits[layers[b]]
            laws = (fa.preferred, fb.preferred)
            reason = "; ".join((["laws differ"] if laws[0] != laws[1] else [])
                               + [f"{v}: {', '.join(n for n, f in ((a, fa), (b, fb)) if f.verdict == v)}"
                                  for v in (NEITHER, SPLIT) if v in (fa.verdict, fb.verdict)])
            what = None if reason else COMPARED[laws[0]]
            if what is None:
                out.append(MemoryDelta(a, b, layers[a], layers[b], None, np.nan, np.nan, np.nan,
                                       level, laws, reason))
                continue
            la, lb = fa.laws[laws[0]], fb.laws[laws[1]]
            d = difference_interval(la.params[what], la.reps[what], fa.profile.resampling,
                                    lb.params[what], lb.reps[what], fb.profile.resampling, level)
            out.append(MemoryDelta(a, b, layers[a], layers[b], what, *d, level, laws))
    return out
