"""Each observable of a trained model against its null models (docs/analysis.md, "Reading a
result against its null").

A null is a model group of the same store whose attribute `null` = {"of", "kind", "seed"}
names the trained model (Store.null, Store.nulls): the same architecture with fresh-init or
entry-permuted weights, swept on the same tokens. For every observable the store holds, the
trained value t (with its own interval) is set beside the nulls' values n_1 … n_k:

- z = (t − mean n) / sd n (sd with k − 1 degrees of freedom; NaN for k < 2) and the rank of
  t among the nulls ("above 3 of 4");
- Δ = t − mean n with an interval that carries both sides: the trained value's sampling
  error (its own bootstrap interval, read as se_t = half-width / z_q) and the spread of a
  fresh null draw, s_n² = max(var of the nulls' values, mean of their own se²) — the seeds'
  spread, never less than what one null's sampling error alone would give. se_Δ² = se_t² +
  s_n² (1 + 1/k) (a new null seed, and the mean of k), and the interval is Δ ± t_{k−1,q} se_Δ
  (Student's t with the k − 1 degrees of freedom the spread was learned from; normal for
  k = 1, where only the null's own sampling error is known). What each side resampled is
  the observable's `unit`.
- the verdict "distinguishable from its null at 90 %" when the family-adjusted p (Holm,
  multiplicity.py) is below 1 − level.

Observables, each skipped quietly when the store lacks it: the primary β (Settings.primary)
at the representative (layer, L); log ‖J_tt‖_F² and Henrici's non-normality of J_tt
averaged over tokens t < L at that layer; with `depth:`, the top finite-depth Lyapunov
exponent averaged over tokens and the kernel's two ratios (ln of non-normality and of
cross-layer alignment, geometric means over tokens) at the run's first layer and longest
span; with `memory:`, the parameter of the law the trained model's profile prefers at the
representative layer (ξ, α or α₂), fitted by that same law in every null, and only when the
trained profile's law is not rejected. Per-token means get the resampling plan of
resampling.py (sequences, or circular blocks of tokens); the memory parameters their
replicate intervals (memory.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from analysis.fit.multiplicity import Family, interval_p
from analysis.fit.resampling import resampling_for
from analysis.fit.window import bootstrap_mle
from analysis.io.aggregate import aggregate
from analysis.spectrum.observables import token_rate_rows
from analysis.studies.depth import kernel_points
from analysis.studies.memory import COMPARED, fit_memory, memory_profile
from analysis.studies.tables import bootstrap_from_agg
from sweep.format.settings import Primary


@dataclass
class Estimate:
    """One model's value of one observable, with its interval and what it resampled."""
    value: float
    lo: float
    hi: float
    unit: str

    def se(self, level) -> float:
        z = stats.norm.ppf((1 + level) / 2)
        return float((self.hi - self.lo) / (2 * z)) if np.isfinite(self.lo) else np.nan


@dataclass
class NullComparison:
    """One observable of one trained model against its nulls (module docstring)."""
    model: str
    observable: str            # what was measured, in words
    trained: Estimate
    nulls: dict                # {null name: Estimate}
    level: float
    delta: float = np.nan
    lo: float = np.nan
    hi: float = np.nan
    p_raw: float = np.nan
    p_adjusted: float = np.nan

    def __post_init__(self):
        k, n = len(self.nulls), self.null_values
        if not k or not np.isfinite(self.trained.value) or not np.isfinite(n).all():
            return
        se_n = np.array([e.se(self.level) for e in self.nulls.values()])
        spread2 = max(n.var(ddof=1) if k > 1 else 0.0, float(np.nanmean(se_n ** 2)))
        se = np.sqrt(self.trained.se(self.level) ** 2 + spread2 * (1 + 1 / k))
        q = stats.t.ppf((1 + self.level) / 2, k - 1) if k > 1 else stats.norm.ppf((1 + self.level) / 2)
        self.delta = float(self.trained.value - n.mean())
        self.lo, self.hi = float(self.delta - q * se), float(self.delta + q * se)
        self.p_raw = interval_p(self.delta, self.lo, self.hi, self.level)

    @property
    def null_values(self) -> np.ndarray:
        return np.array([e.value for e in self.nulls.values()], np.float64)

    @property
    def z(self) -> float:
        n = self.null_values
        return float((self.trained.value - n.mean()) / n.std(ddof=1)) if len(n) > 1 and n.std() > 0 else np.nan

    @property
    def rank(self) -> int:
        """How many nulls lie below the trained value."""
        return int((self.null_values < self.trained.value).sum())

    @property
    def verdict(self) -> str:
        if not np.isfinite(self.lo):
            return "not measured"
        p = self.p_adjusted if np.isfinite(self.p_adjusted) else self.p_raw
        word = "distinguishable" if p < 1 - self.level else "not distinguishable"
        return f"{word} from its null at {self.level * 100:g} %"

    def to_dict(self) -> dict:
        return {"model": self.model, "observable": self.observable,
                "trained": vars(self.trained), "nulls": {k: vars(v) for k, v in self.nulls.items()},
                "z": self.z, "rank": self.rank, "n_nulls": len(self.nulls), "delta": self.delta,
                "ci": [self.lo, self.hi], "p_raw": self.p_raw, "p_adjusted": self.p_adjusted,
                "level": self.level, "verdict": self.verdict}


def primary_beta(st, layer, L, settings, primary: Primary) -> Estimate | None:
    """The primary β of (layer, L): the in-window MLE or the cumulative fit, its interval
    resampling tokens as Table I does."""
    if primary.estimator == "mle":
        rates, seq = token_rate_rows(st, layer, L, skip=settings.skip_positions)[primary.modes]
        if not len(rates):
            return None
        m = bootstrap_mle(rates, seq, settings.window, settings.n_boot, settings.level, settings.seed)
        return Estimate(m.beta, m.lo, m.hi, m.unit)
    agg = aggregate(st.path, progress=None).model(st.name).skipping(settings.skip_positions)
    b, _ = bootstrap_from_agg(agg, layer, L, primary.modes, settings.window, settings.n_boot,
                              settings.level, settings.seed)
    return Estimate(b.beta, b.lo, b.hi, b.unit)


def token_mean(values, seq, settings, log=False) -> Estimate | None:
    """Mean over tokens of a per-token observable (log scale when `log`), its interval from
    the resampling plan of resampling.py (whole sequences, or circular blocks)."""
    v = np.asarray(values, np.float64)
    ok = np.isfinite(v) & ((v > 0) if log else True)
    v, seq = (np.log(v[ok]) if log else v[ok]), np.asarray(seq)[ok]
    if len(v) < 4:
        return None
    order = np.argsort(seq, kind="stable")
    v, seq = v[order], seq[order]
    plan = resampling_for(v - v.mean(), seq)
    sums = plan.replicate_sums(np.stack([v, np.ones_like(v)], 1), settings.n_boot, settings.seed)
    lo, hi = plan.interval(v.mean(), sums[:, 0] / sums[:, 1], settings.level)
    return Estimate(float(v.mean()), lo, hi, plan.unit)


def _per_token(st, layer, L, reader, settings):
    skip = settings.skip_positions
    vals = [getattr(st, reader)(layer, s)[skip:L] for s in range(st.n_seqs)]
    return np.concatenate(vals), np.repeat(np.arange(st.n_seqs), [len(x) for x in vals])


def observables(st, layer, L, settings, primary: Primary, law=None) -> tuple[dict, str | None]:
    """({observable: Estimate} of one model group: those its store holds; the memory law
    compared). `law`: the memory law to read (a null reads its trained model's); None: the
    law this group's own profile prefers, when it fits."""
    out = {f"β ({primary.name})": primary_beta(st, layer, L, settings, primary)}
    for name, reader, log in (("log ‖J_tt‖_F² (token mean of the log)", "frobenius2", True),
                              ("non-normality of J_tt (token mean)", "nonnormality", False)):
        if reader in st.group:
            out[name] = token_mean(*_per_token(st, layer, L, reader, settings), settings, log)
    if st.depth and "lyapunov" in st.group:
        g = [st.lyapunov(s)[:, 0] for s in range(st.n_seqs)]        # (L,) top exponent per token
        out["top Lyapunov exponent (token mean)"] = token_mean(
            np.concatenate(g), np.repeat(np.arange(st.n_seqs), [len(x) for x in g]), settings)
        out.update(_kernel_ratios(st, settings))
    law = _memory(st, layer, settings, law, out) if "memory" in st.group else None
    return {k: v for k, v in out.items() if v is not None and np.isfinite(v.value)}, law


def _kernel_ratios(st, settings) -> dict:
    """ln of the kernel's non-normality and alignment at the run's first start, longest span."""
    points = kernel_points(st, settings)
    if not points:
        return {}
    k = max(points, key=lambda p: (p.span, -p.layer))
    return {f"ln {part} of the kernel (l = {k.layer}, s = {k.span})":
            Estimate(*np.log([c.value, c.lo, c.hi]), c.unit)
            for part in ("nonnormality", "alignment") if (c := getattr(k, part)).value > 0}


def _memory(st, layer, settings, law, out) -> str | None:
    """Add the memory parameter of `law` (None: this profile's preferred law, if it fits)."""
    if layer not in st.layers:
        return None
    fit = fit_memory(memory_profile(st, layer, settings), settings=settings)
    if law is None:
        if fit.law is None:             # rejected, or the replicates split
            return None
        law = fit.preferred
    name = COMPARED[law]
    f = fit.laws.get(law)
    if f is not None:
        out[f"memory {name} ({law}, layer {layer})"] = Estimate(f.params[name], *f.ci[name], fit.unit)
    return law


@dataclass
class NullStudy:
    """Every observable of one trained model against its nulls."""
    model: str
    layer: int
    L: int
    nulls: dict                # {null name: {"kind", "seed"}}
    comparisons: list = field(default_factory=list)     # [NullComparison]

    def add_to(self, family: Family) -> list:
        """Enter every comparison into `family`; returns its tests (adjusted by family.correct())."""
        return [family.add(f"{self.model} − its nulls: {c.observable}", c.delta, c.lo, c.hi)
                for c in self.comparisons]

    def take(self, tests) -> None:
        """Each comparison's raw and family-adjusted p from its test (after family.correct())."""
        for c, t in zip(self.comparisons, tests):
            c.p_raw, c.p_adjusted = t.p_raw, t.p_adjusted

    def to_dict(self) -> dict:
        return {"model": self.model, "layer": self.layer, "L": self.L, "nulls": self.nulls,
                "method": __doc__.split("\n\n")[1], "comparisons": [c.to_dict() for c in self.comparisons]}


def null_study(st, layer, L, settings, primary: Primary) -> NullStudy | None:
    """Each observable of model `st` at (layer, L) against its nulls; None without nulls."""
    if not st.nulls:
        return None
    trained, law = observables(st, layer, L, settings, primary)
    by_null = {n: observables(st.model(n), layer, L, settings, primary, law)[0] for n in st.nulls}
    study = NullStudy(st.name, layer, L, {n: st.model(n).null for n in st.nulls})
    for name, est in trained.items():
        nulls = {n: obs[name] for n, obs in by_null.items() if name in obs}
        if nulls:
            study.comparisons.append(NullComparison(st.name, name, est, nulls, settings.level))
    return study
