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

The observables and their intervals: analysis/studies/estimates.py.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from analysis.fit.enough import Enough, enough, worst
from analysis.fit.multiplicity import Family, p_from_t, quantile, t_method
from analysis.studies.estimates import Estimate, FirstSequences, key_of, observables
from sweep.format.settings import Primary


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


@dataclass(frozen=True)
class NullComparison:
    """One observable of one trained model against its nulls of one kind (module docstring),
    Δ and its interval made at construction; its p counted in a family by `counted`."""
    model: str
    observable: str            # what was measured, in words (the label every table prints)
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
    key: str = ""              # what it is, whatever its label says: "beta", "density", …

    def __post_init__(self):
        """Δ, its interval and p, made once at construction (module docstring); a counted copy
        (`counted`) carries them over and is not made again."""
        k, n = len(self.nulls), self.null_values
        if (not np.isnan(self.delta) or not self.check.ok or not np.isfinite(self.trained.value)
                or not np.isfinite(n).all()):
            return
        se_n = np.array([e.se(self.level) for e in self.nulls.values()])
        spread2 = max(n.var(ddof=1) if k > 1 else 0.0, float(np.nanmean(se_n ** 2)))
        se = np.sqrt(self.trained.se(self.level) ** 2 + spread2 * (1 + 1 / k))
        dof = float(k - 1) if k > 1 else np.inf
        q = quantile(self.level, dof)
        delta = float(self.trained.value - n.mean())
        for name, value in (("delta", delta), ("lo", float(delta - q * se)),
                            ("hi", float(delta + q * se)), ("dof", dof),
                            ("p_raw", p_from_t(delta, se, dof))):
            object.__setattr__(self, name, value)       # frozen: set once, here

    def counted(self, test) -> "NullComparison":
        """This comparison with its raw and family-adjusted p from `test` (multiplicity.Test)."""
        return dataclasses.replace(self, p_raw=test.p_raw, p_adjusted=test.p_adjusted)

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
                "level": self.level, "check": self.check.to_dict(), "verdict": self.verdict,
                "key": self.key}


@dataclass(frozen=True)
class NullStudy:
    """Every observable of one trained model against its nulls, one comparison per kind."""
    model: str
    layer: int
    L: int
    nulls: dict                # {null name: {"kind", "seed", "of", "role"}}
    kinds: dict = field(default_factory=dict)           # {kind: {nulls, sequences, L, same_tokens}}
    comparisons: tuple = ()    # (NullComparison, ...)
    family_m: int = 0          # tests in the family its comparisons were counted in (`counted`)

    def entries(self) -> list:
        """Family.counted's entries: every comparison with its t(k − 1)."""
        return [(c.test_name(), c.delta, c.lo, c.hi, {"dof": c.dof, "short": c.check.text})
                for c in self.comparisons]

    def add_to(self, family: Family) -> list:
        """Enter every comparison into `family`; returns its tests (adjusted by family.correct())."""
        return [family.add(name, d, lo, hi, **kw) for name, d, lo, hi, kw in self.entries()]

    def counted(self, tests, m) -> "NullStudy":
        """This study with each comparison's raw and family-adjusted p from its test (after
        the correction of a family of m tests)."""
        return dataclasses.replace(self, family_m=int(m), comparisons=tuple(
            c.counted(t) for c, t in zip(self.comparisons, tests)))

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


def null_study(st, layer, L, settings, primary: Primary, window_slope=False) -> NullStudy | None:
    """Each observable of model `st` at (layer, L) against its nulls, one kind at a time, the
    trained value read on the nulls' sequences and positions; None without nulls.
    `window_slope`: the power law is rejected at this (layer, L), so the β rows are named
    window-slope tests. Its p are each comparison's own until a family counts them."""
    if not st.nulls:
        return None
    kinds, comparisons = {}, []
    trained_on = {}                 # (sequences, L): the trained observables there, read once
    for kind, names in by_kind(st).items():
        S = min(st.n_seqs, *(st.model(n).n_seqs for n in names))
        Lk = min(L, *(st.model(n).layer_length.get(layer, L) for n in names))
        if (S, Lk) not in trained_on:
            trained_on[S, Lk] = observables(FirstSequences(st, S), layer, Lk, settings, primary)
        trained, law = trained_on[S, Lk]
        kinds[kind] = {"nulls": names, "sequences": S, "of_sequences": st.n_seqs, "L": Lk,
                       "same_tokens": _same_tokens(st, names, S)}
        by_null = {n: observables(FirstSequences(st.model(n), S), layer, Lk, settings, primary,
                                  law)[0] for n in names}
        for name, est in trained.items():
            nulls = {n: obs[name] for n, obs in by_null.items() if name in obs}
            if nulls:
                comparisons.append(NullComparison(st.name, slope_label(name, window_slope),
                                                  est, nulls, settings.level, kind, S,
                                                  key=key_of(name)))
    return NullStudy(st.name, layer, L, {n: st.model(n).variant.attrs() for n in st.nulls},
                     kinds, tuple(comparisons))


def slope_label(name, window_slope) -> str:
    """A β observable's label as a window slope where the power law is rejected."""
    return f"window slope {name}" if window_slope and key_of(name) == "beta" else str(name)
