"""Each observable of a quantized model over its quantization ensemble (docs/nulls.md, "The
quantization ensemble"; docs/analysis.md, "Reading a result against its quantization").

A member is a model group whose attribute `variant` = {"kind", "seed", "of", "role": "ensemble"}
names the trained model (Store.ensemble, sweep/format/variants.py): the model with every weight
moved within its own rounding bin, swept on the first sequences of the model's tokens. Per observable
the trained value is set beside the members' values: their min, max and sd (k − 1 degrees of
freedom), and how far the trained value lies from the members' range, in units of that sd.

The spread sets the trained value and the members on the same tokens (the members' sequences).
A trained-vs-null verdict stands with the ensemble only when it holds at every member, one null
kind at a time (kinds are never pooled: studies/nulls.py): on the tokens the trained model, the
members and that kind's nulls share, each member's observable is compared with those nulls in
the same way as the trained value (NullComparison, its own interval and p), and the
ensemble's p of an (observable, kind) is the largest of the trained and the members' raw p (an
intersection-union test: "Δ ≠ 0 at every member" is rejected at level α only where each member
rejects at α, Berger 1982); those p are adjusted by Holm over the model's (observable, kind)
pairs (multiplicity.py), and the verdict reads "stands" only where that adjusted p is below
1 − level with every Δ of the trained value's sign.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from analysis.fit.multiplicity import Family
from analysis.studies.estimates import LAYER_OBSERVABLES, FirstSequences, key_of, observables
from analysis.studies.nulls import NullComparison, by_kind


@dataclass(frozen=True)
class AgainstNulls:
    """One observable of the trained model and every member against the nulls of one kind."""
    kind: str
    sequences: int                    # the sequences the trained model, members and nulls share
    comparisons: dict                 # {trained or member name: NullComparison}
    level: float = 0.9
    p_adjusted: float = np.nan        # p_ensemble, Holm over the model's (observable, kind)

    @property
    def worst(self) -> NullComparison:
        """The comparison (trained value or member) that gives the ensemble's p."""
        return max(self.comparisons.values(), key=lambda c: c.p_raw)

    @property
    def p_ensemble(self) -> float:
        p = [c.p_raw for c in self.comparisons.values()]
        return float(max(p)) if p and np.all(np.isfinite(p)) else np.nan

    @property
    def same_sign(self) -> bool:
        signs = {np.sign(c.delta) for c in self.comparisons.values()}
        return len(signs) == 1 and 0 not in signs

    @property
    def verdict(self) -> str:
        if not np.isfinite(self.p_adjusted):
            return "not measured"
        stands = self.p_adjusted < 1 - self.level and self.same_sign
        return (f"stands at every member against its {self.kind} nulls" if stands else
                f"does not hold at every member against its {self.kind} nulls") + \
            f" at {self.level * 100:g} %"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "sequences": self.sequences,
                "comparisons": {k: {"delta": c.delta, "ci": [c.lo, c.hi], "p_raw": c.p_raw,
                                    "p_method": c.p_method} for k, c in self.comparisons.items()},
                "p_ensemble": self.p_ensemble, "p_adjusted": self.p_adjusted,
                "verdict": self.verdict}


@dataclass(frozen=True)
class Spread:
    """One observable of one model over its ensemble, on the members' tokens; `against_nulls`
    {kind: AgainstNulls} when it has nulls."""
    observable: str
    trained: object                   # nulls.Estimate, on the members' sequences
    members: dict                     # {member name: nulls.Estimate}
    sequences: int = 0                # the members' sequences
    against_nulls: dict = field(default_factory=dict)
    level: float = 0.9

    @property
    def values(self) -> np.ndarray:
        return np.array([e.value for e in self.members.values()], np.float64)

    @property
    def sd(self) -> float:
        v = self.values
        return float(v.std(ddof=1)) if len(v) > 1 else np.nan

    def to_dict(self) -> dict:
        v = self.values
        return {"observable": self.observable, "sequences": self.sequences,
                "trained": vars(self.trained),
                "members": {k: vars(e) for k, e in self.members.items()},
                "min": float(v.min()), "max": float(v.max()), "sd": self.sd,
                "against_nulls": {k: a.to_dict() for k, a in self.against_nulls.items()}}


@dataclass(frozen=True)
class EnsembleStudy:
    """Every observable of one quantized model over its ensemble (module doc)."""
    model: str
    layer: int
    L: int
    members: list
    spreads: tuple = ()        # (Spread, ...)
    family: Family | None = None

    def to_dict(self) -> dict:
        return {"model": self.model, "layer": self.layer, "L": self.L, "members": self.members,
                "method": __doc__.split("\n\n")[1] + "\n\n" + __doc__.split("\n\n")[2],
                "observables": [s.to_dict() for s in self.spreads],
                "family": None if self.family is None else self.family.to_dict()}


def ensemble_study(st, layer, L, settings, primary) -> EnsembleStudy | None:
    """Model `st`'s observables at (layer, L) over its quantization ensemble; None without one."""
    if not st.ensemble:
        return None
    study, n_kinds = _spreads(st, layer, L, settings, primary)
    tested, family = _counted([study], f"{st.name} with its quantization ensemble against its "
                              f"nulls", {"observables": len(study.spreads),
                                         "null kinds, each its own comparison": n_kinds},
                              settings.level)
    return dataclasses.replace(tested[0], family=family)


@dataclass(frozen=True)
class EnsembleDepth:
    """β and the window mode density over the ensemble at every layer the members were swept
    at, each layer's verdicts counted in one family across the layers (the representative
    layer's own study, `ensemble_study`, has its family apart, as the nulls' across depth)."""
    model: str
    L: int                     # the representative L, each layer read at min(L, its length)
    layers: list
    studies: dict              # {layer: EnsembleStudy}
    family: Family | None = None

    def to_dict(self) -> dict:
        return {"model": self.model, "L": self.L, "layers": self.layers,
                "observables": list(LAYER_OBSERVABLES),
                "family": None if self.family is None else self.family.to_dict(),
                "by_layer": {ly: s.to_dict() for ly, s in self.studies.items()}}


def ensemble_across_depth(st, L, settings, primary) -> EnsembleDepth | None:
    """The ensemble's spread of β and the window mode density at every layer the trained model
    and all its members swept (None with fewer than two such layers, or no members)."""
    members = st.ensemble
    layers = [ly for ly in st.layers if all(ly in st.model(m).layers for m in members)]
    if not members or len(layers) < 2:
        return None
    made = [_spreads(st, ly, min(L, st.layer_length[ly]), settings, primary, LAYER_OBSERVABLES)
            for ly in layers]
    studies, family = _counted(
        [s for s, _ in made], f"{st.name}: its quantization ensemble against its nulls across "
        f"depth", {"layers": len(layers), "observables": len(LAYER_OBSERVABLES),
                   "null kinds, each its own comparison": max(k for _, k in made)},
        settings.level)
    return EnsembleDepth(st.name, L, layers, dict(zip(layers, studies)), family)


def _spreads(st, layer, L, settings, primary, keys=None) -> tuple[EnsembleStudy, int]:
    """(the uncounted EnsembleStudy of (layer, L), the null kinds it is read against)."""
    members = st.ensemble
    S = min(st.n_seqs, *(st.model(m).n_seqs for m in members))
    trained, law = _observables(st, S, layer, L, settings, primary, None, keys)
    by_member = {m: _observables(st.model(m), S, layer, L, settings, primary, law, keys)[0]
                 for m in members}
    against = {kind: _against(st, members, kind, names, layer, L, settings, primary, law, keys)
               for kind, names in by_kind(st).items()}
    spreads = []
    for name, est in trained.items():
        got = {m: obs[name] for m, obs in by_member.items() if name in obs}
        if len(got) == len(members):          # a member that lacks it: no spread to report
            spreads.append(Spread(name, est, got, S, {k: a[name] for k, a in against.items()
                                                       if name in a}, settings.level))
    return EnsembleStudy(st.name, layer, L, members, tuple(spreads)), len(against)


def _counted(studies, label, dims, level) -> tuple[list, Family | None]:
    """`studies` with each (layer, observable, kind)'s ensemble p adjusted by Holm over all of
    them, and that family (None: nothing tested). The family reads each p back from the
    interval that gave it, with the same t(k − 1)."""
    tested = [(st, s, a) for st in studies for s in st.spreads for a in s.against_nulls.values()
              if np.isfinite(a.p_ensemble)]
    if not tested:
        return list(studies), None
    where = len(studies) > 1
    family = Family.counted(label, dims, level, [
        (f"{f'layer {st.layer}: ' if where else ''}{s.observable} against its {a.kind} nulls",
         a.worst.delta, a.worst.lo, a.worst.hi, {"dof": a.worst.dof}) for st, s, a in tested])
    adjusted = {(st.layer, s.observable, a.kind): t.p_adjusted
                for (st, s, a), t in zip(tested, family.tests)}
    return [dataclasses.replace(st, spreads=tuple(dataclasses.replace(s, against_nulls={
        k: dataclasses.replace(a, p_adjusted=adjusted.get((st.layer, s.observable, k), np.nan))
        for k, a in s.against_nulls.items()}) for s in st.spreads)) for st in studies], family


def _observables(model, S, layer, L, settings, primary, law=None, keys=None):
    return observables(FirstSequences(model, S), layer, L, settings, primary, law, keys)


def _against(st, members, kind, names, layer, L, settings, primary, law, keys=None) -> dict:
    """{observable: AgainstNulls}: the trained value and every member against the nulls
    `names` of kind `kind`, on the sequences all of them share."""
    S = min(st.n_seqs, *(st.model(m).n_seqs for m in members), *(st.model(n).n_seqs for n in names))
    who = {st.name: st, **{m: st.model(m) for m in members}}
    est = {w: _observables(g, S, layer, L, settings, primary, law, keys)[0] for w, g in who.items()}
    nulls = {n: _observables(st.model(n), S, layer, L, settings, primary, law, keys)[0]
             for n in names}
    out = {}
    for name in est[st.name]:
        of_kind = {n: obs[name] for n, obs in nulls.items() if name in obs}
        if of_kind and all(name in e for e in est.values()):
            out[name] = AgainstNulls(kind, S, {
                w: NullComparison(w, name, e[name], of_kind, settings.level, kind, S, key=key_of(name))
                for w, e in est.items()}, settings.level)
    return out
