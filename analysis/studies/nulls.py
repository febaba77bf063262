"""Each observable of a trained model against its null models, one null kind at a time, on the
trained model's own tokens (docs/analysis.md, "Reading a result against its null").

A null is a model group of the same store whose attribute `variant` = {"kind", "seed", "of",
"role": "null"} names the trained model (Store.variant, Store.nulls, sweep/format/variants.py):
the same architecture with weights of one registered kind (docs/nulls.md), swept on the first
`nulls.sequences` of its sequences. The kinds are never pooled: random_init and shuffled
weights give different values (e.g. log ‖J‖²), so pooled they would make one "null
distribution" with a spread neither kind has. For every
kind and every observable the store holds, the trained value t is computed on exactly the
nulls' tokens (their sequences, the same positions: `FirstSequences`) and set beside the k
nulls' values n_1 … n_k of that kind:

- z = (t − mean n) / sd n (sd with k − 1 degrees of freedom; NaN for k < 2) and the rank of
  t among the nulls ("above 3 of 4"), with its two-sided rank p, 2 min(1 + below, 1 +
  above) / (k + 1), which can never fall below 2/(k + 1);
- Δ = t − mean n with an interval that carries both sides: the trained value's sampling
  error (its own interval, read as se_t = half-width / its quantile) and the spread of a
  fresh null draw, s_n² = max(var of the nulls' values, mean of their own se²) — the seeds'
  spread, never less than what one null's sampling error alone would give. se_Δ² = se_t² +
  s_n² (1 + 1/k) (a new null seed, and the mean of k), and the interval is Δ ± t_{k−1,q} se_Δ
  (Student's t with the k − 1 degrees of freedom the spread was learned from; one null of a
  kind is not enough data for it, fit/enough.py). Its p is read from the same
  t_{k−1} (p_method "t(k−1)", multiplicity.py), so p < 1 − level exactly when the interval
  excludes 0. What each side resampled is the observable's `unit`.
- the verdict "distinguishable from its <kind> nulls" when the family-adjusted p (Holm,
  multiplicity.py) is below 1 − level, else "no difference from its <kind> nulls shown":
  never "the same", since k nulls can only show a difference larger than their design allows
  (`design_line`: the smallest p of a rank test, and the |Δ|/se a t_{k−1} test needs);
  "not enough data (n = …, needs …)" and no verdict where a side falls short of its minimum
  (fit/enough.py: 2 nulls, 500 modes in the window for β).

Observables, each skipped quietly when the store lacks it: the primary β (Settings.primary)
at the representative (layer, L); log ‖J_tt‖_F² and Henrici's non-normality of J_tt
averaged over tokens t < L at that layer; with `depth:`, the top finite-depth Lyapunov
exponent averaged over every walked token and the kernel's two ratios (ln of non-normality
and of cross-layer alignment, geometric means over tokens) at the run's first layer and
longest span; with `memory:`, the parameter of the law the trained model's profile prefers
at the representative layer (ξ, α or α₂), fitted by that same law in every null, and only
when the trained profile's law is not rejected. Each Estimate says which positions it read.
Per-token means get the resampling plan of resampling.py (sequences, or circular blocks of
tokens); the memory parameters their replicate intervals (memory.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis.fit.enough import Enough, enough, worst
from analysis.fit.multiplicity import Family, p_from_t, quantile, t_method
from analysis.fit.resampling import resampling_for
from analysis.fit.window import bootstrap_mle, window_density
from analysis.io.aggregate import aggregate
from analysis.spectrum.observables import token_rate_rows
from analysis.spectrum.rates import floor_edge, resolution_floor
from analysis.studies.depth import kernel_points
from analysis.studies.memory import COMPARED, fit_memory, memory_profile
from analysis.studies.tables import bootstrap_from_agg
from sweep.format.settings import Primary


@dataclass
class Estimate:
    """One model's value of one observable, with its interval, what it resampled, the
    degrees of freedom its interval's quantile had (inf: normal) and the positions read."""
    value: float
    lo: float
    hi: float
    unit: str
    dof: float = np.inf
    positions: str = ""
    check: dict | None = None  # its minimum (fit/enough.py, Enough.to_dict), where it has one

    def se(self, level) -> float:
        if not np.isfinite(self.lo):
            return np.nan
        return float((self.hi - self.lo) / (2 * quantile(level, self.dof)))


class FirstSequences:
    """Store `st` read through its first `n` sequences: the tokens its nulls ran on
    (`nulls.sequences`); every reader here iterates range(st.n_seqs)."""

    def __init__(self, st, n):
        self._st, self.n_seqs = st, int(n)

    def __getattr__(self, name):
        return getattr(self._st, name)


def rank_p(rank, k) -> float:
    """Two-sided p of a rank test: the trained value above `rank` of k nulls."""
    return float(min(1.0, 2 * min(1 + rank, 1 + k - rank) / (k + 1))) if k else np.nan


def design_line(k, level, m) -> str:
    """What k nulls of one kind can show in a family of m tests (module docstring)."""
    alpha = (1 - level) / max(m, 1)             # what the smallest p must reach under Holm
    rank = f"a rank test cannot go below p = 2/(k + 1) = {rank_p(k, k):.2g}"
    if k < 2:
        return f"k = {k}: {rank}; {enough('t_interval', k).text} for a t interval"
    need = quantile(1 - alpha, k - 1)
    return (f"k = {k}: {rank}; the t({k - 1}) test reaches the first Holm level "
            f"(1 − {level:g})/{m} = {alpha:.2g} only when |Δ| > {need:.3g} se_Δ")


@dataclass
class NullComparison:
    """One observable of one trained model against its nulls of one kind (module docstring)."""
    model: str
    observable: str            # what was measured, in words
    trained: Estimate          # on the nulls' sequences and positions
    nulls: dict                # {null name: Estimate}, all of kind `kind`
    level: float
    kind: str = ""
    sequences: int = 0         # sequences both sides read
    delta: float = np.nan
    lo: float = np.nan
    hi: float = np.nan
    dof: float = np.inf
    p_raw: float = np.nan
    p_adjusted: float = np.nan

    def __post_init__(self):
        k, n = len(self.nulls), self.null_values
        if not self.check.ok or not np.isfinite(self.trained.value) or not np.isfinite(n).all():
            return
        se_n = np.array([e.se(self.level) for e in self.nulls.values()])
        spread2 = max(n.var(ddof=1) if k > 1 else 0.0, float(np.nanmean(se_n ** 2)))
        se = np.sqrt(self.trained.se(self.level) ** 2 + spread2 * (1 + 1 / k))
        self.dof = float(k - 1) if k > 1 else np.inf
        q = quantile(self.level, self.dof)
        self.delta = float(self.trained.value - n.mean())
        self.lo, self.hi = float(self.delta - q * se), float(self.delta + q * se)
        self.p_raw = p_from_t(self.delta, se, self.dof)

    @property
    def p_method(self) -> str:
        return t_method(self.dof)

    @property
    def check(self) -> Enough:
        """The first minimum this comparison falls short of: two nulls for a t interval, then
        the trained value's and each null's own (fit/enough.py)."""
        own = [c if isinstance(c, Enough) else Enough.from_dict(c)
               for c in (e.check for e in (self.trained, *self.nulls.values())) if c is not None]
        return worst(enough("t_interval", len(self.nulls)), *own)

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
    def p_rank(self) -> float:
        return rank_p(self.rank, len(self.nulls))

    @property
    def verdict(self) -> str:
        if not self.check.ok:
            return self.check.text
        if not np.isfinite(self.lo):
            return "not measured"
        p = self.p_adjusted if np.isfinite(self.p_adjusted) else self.p_raw
        if p < 1 - self.level:
            return f"distinguishable from its {self.kind} nulls at {self.level * 100:g} %"
        return f"no difference from its {self.kind} nulls shown at {self.level * 100:g} %"

    def test_name(self) -> str:
        """The comparison as a family row: model, kind, k, tokens, observable."""
        return (f"{self.model} − its {len(self.nulls)} {self.kind} nulls ({self.sequences} seq, "
                f"{self.trained.positions}): {self.observable}")

    def to_dict(self) -> dict:
        return {"model": self.model, "observable": self.observable, "kind": self.kind,
                "sequences": self.sequences, "positions": self.trained.positions,
                "trained": vars(self.trained), "nulls": {k: vars(v) for k, v in self.nulls.items()},
                "z": self.z, "rank": self.rank, "p_rank": self.p_rank, "n_nulls": len(self.nulls),
                "delta": self.delta, "ci": [self.lo, self.hi], "dof": self.dof,
                "p_raw": self.p_raw, "p_method": self.p_method, "p_adjusted": self.p_adjusted,
                "level": self.level, "check": self.check.to_dict(), "verdict": self.verdict}


def _dof(interval) -> float:
    """The degrees of freedom an interval's quantile used (its plan's; inf when it says none)."""
    d = getattr(interval, "dof", None)
    if d is None:
        d = getattr(getattr(interval, "resampling", None), "dof", None)
    return float(d) if d is not None else np.inf


def window_density_of(st, layer, L, settings, primary: Primary) -> Estimate | None:
    """Stable modes per token in the fit window (window.window_density), the primary count."""
    rates, seq = token_rate_rows(st, layer, L, skip=settings.skip_positions)[primary.modes]
    if not len(rates):
        return None
    d = window_density(rates, seq, settings.window, settings.n_boot, settings.level, settings.seed)
    return Estimate(d.value, d.lo, d.hi, d.unit, d.dof, f"t < {L}",
                    enough("token_mean", len(rates)).to_dict())


def primary_beta(st, layer, L, settings, primary: Primary) -> Estimate | None:
    """The primary β of (layer, L) over st's sequences: the in-window MLE or the cumulative
    fit, its interval resampling tokens as Table I does."""
    where = f"t < {L}"
    if primary.estimator == "mle":
        rates, seq = token_rate_rows(st, layer, L, skip=settings.skip_positions)[primary.modes]
        if not len(rates):
            return None
        m = bootstrap_mle(rates, seq, settings.window, settings.n_boot, settings.level, settings.seed)
        return Estimate(m.beta, m.lo, m.hi, m.unit, _dof(m), where, enough("beta", m.n_modes).to_dict())
    agg = aggregate(st.path, progress=None).model(st.name).skipping(settings.skip_positions)
    floor, why = resolution_floor(st.dtype) if primary.modes == "all-stable" else (0.0, "")
    b, _ = bootstrap_from_agg(agg, layer, L, primary.modes, settings.window, settings.n_boot,
                              settings.level, settings.seed, n_seqs=st.n_seqs, floor=floor)
    if why:                             # as Table I counts it, and said
        where += f", all-stable λ ≥ {floor_edge(floor)[0]:.3g} ({why})"
    return Estimate(b.beta, b.lo, b.hi, b.unit, _dof(b), where, enough("beta", b.fit.n_modes).to_dict())


def token_mean(values, seq, settings, log=False, positions="") -> Estimate | None:
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
    return Estimate(float(v.mean()), lo, hi, plan.unit, _dof(plan), positions)


def _per_token(st, layer, L, reader, settings):
    skip = settings.skip_positions
    vals = [getattr(st, reader)(layer, s)[skip:L] for s in range(st.n_seqs)]
    return np.concatenate(vals), np.repeat(np.arange(st.n_seqs), [len(x) for x in vals])


def observables(st, layer, L, settings, primary: Primary, law=None) -> tuple[dict, str | None]:
    """({observable: Estimate} of one model group over its sequences st.n_seqs: those its
    store holds; the memory law compared). `law`: the memory law to read (a null reads its
    trained model's); None: the law this group's own profile prefers, when it fits."""
    out = {f"β ({primary.name})": primary_beta(st, layer, L, settings, primary),
           f"window mode density ({primary.modes} modes per token in the window)":
           window_density_of(st, layer, L, settings, primary)}
    for name, reader, log in (("log ‖J_tt‖_F² (token mean of the log)", "frobenius2", True),
                              ("non-normality of J_tt (token mean)", "nonnormality", False)):
        if reader in st.group:
            out[name] = token_mean(*_per_token(st, layer, L, reader, settings), settings, log,
                                   f"t < {L}")
    if st.depth and "lyapunov" in st.group:
        g = [st.lyapunov(s)[:, 0] for s in range(st.n_seqs)]        # (L_max,) top exponent per token
        out["top Lyapunov exponent (token mean)"] = token_mean(
            np.concatenate(g), np.repeat(np.arange(st.n_seqs), [len(x) for x in g]), settings,
            positions=f"every walked t < {st.max_length}")
        out.update(_kernel_ratios(st, settings))
    law = _memory(st, layer, settings, law, out) if "memory" in st.group else None
    return {k: v for k, v in out.items() if v is not None and np.isfinite(v.value)}, law


def _kernel_ratios(st, settings) -> dict:
    """ln of the kernel's non-normality and alignment at the run's first start, longest span."""
    points = kernel_points(st, settings)
    if not points:
        return {}
    k = max(points, key=lambda p: (p.span, -p.layer))
    where = f"every walked t < {st.max_length}"
    return {f"ln {part} of the kernel (l = {k.layer}, s = {k.span})":
            Estimate(*np.log([c.value, c.lo, c.hi]), c.unit, _dof(c), where)
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
        every = st.memory_meta.get("every", 1)
        out[f"memory {name} ({law}, layer {layer})"] = Estimate(
            f.params[name], *f.ci[name], fit.unit, _dof(fit),
            f"t = 0, {every}, … < {st.layer_length[layer]}")
    return law


@dataclass
class NullStudy:
    """Every observable of one trained model against its nulls, one comparison per kind."""
    model: str
    layer: int
    L: int
    nulls: dict                # {null name: {"kind", "seed", "of", "role"}}
    kinds: dict = field(default_factory=dict)           # {kind: {nulls, sequences, L, same_tokens}}
    comparisons: list = field(default_factory=list)     # [NullComparison]
    family_m: int = 0          # tests in the family its comparisons were counted in (`take`)

    def add_to(self, family: Family) -> list:
        """Enter every comparison into `family`, each with its t(k − 1); returns its tests
        (adjusted by family.correct())."""
        return [family.add(c.test_name(), c.delta, c.lo, c.hi, dof=c.dof) for c in self.comparisons]

    def take(self, tests, m) -> None:
        """Each comparison's raw and family-adjusted p from its test (after family.correct()
        of a family of m tests)."""
        self.family_m = int(m)
        for c, t in zip(self.comparisons, tests):
            c.p_raw, c.p_adjusted = t.p_raw, t.p_adjusted

    def designs(self, level) -> dict:
        """{kind: design_line} in the family the comparisons were counted in."""
        return {kind: design_line(len(v["nulls"]), level, self.family_m or len(self.comparisons))
                for kind, v in self.kinds.items()}

    def to_dict(self) -> dict:
        return {"model": self.model, "layer": self.layer, "L": self.L, "nulls": self.nulls,
                "kinds": self.kinds, "family_m": self.family_m,
                "designs": self.designs(self.comparisons[0].level) if self.comparisons else {},
                "method": __doc__.split("\n\n")[1],
                "comparisons": [c.to_dict() for c in self.comparisons]}


def by_kind(st) -> dict:
    """{kind: [null names]} in the store's order."""
    return st.null_kinds()


def _same_tokens(st, nulls, n_seqs) -> bool:
    return all(np.array_equal(st.tokens(s), st.model(n).tokens(s)) for n in nulls for s in range(n_seqs))


def null_study(st, layer, L, settings, primary: Primary) -> NullStudy | None:
    """Each observable of model `st` at (layer, L) against its nulls, one kind at a time, the
    trained value read on the nulls' sequences and positions; None without nulls."""
    if not st.nulls:
        return None
    study = NullStudy(st.name, layer, L, {n: st.model(n).variant.attrs() for n in st.nulls})
    trained_on = {}                 # (sequences, L): the trained observables there, read once
    for kind, names in by_kind(st).items():
        S = min(st.n_seqs, *(st.model(n).n_seqs for n in names))
        Lk = min(L, *(st.model(n).layer_length.get(layer, L) for n in names))
        if (S, Lk) not in trained_on:
            trained_on[S, Lk] = observables(FirstSequences(st, S), layer, Lk, settings, primary)
        trained, law = trained_on[S, Lk]
        study.kinds[kind] = {"nulls": names, "sequences": S, "of_sequences": st.n_seqs, "L": Lk,
                             "same_tokens": _same_tokens(st, names, S)}
        by_null = {n: observables(FirstSequences(st.model(n), S), layer, Lk, settings, primary,
                                  law)[0] for n in names}
        for name, est in trained.items():
            nulls = {n: obs[name] for n, obs in by_null.items() if name in obs}
            if nulls:
                study.comparisons.append(NullComparison(st.name, name, est, nulls, settings.level,
                                                        kind, S))
    return study
