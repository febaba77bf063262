"""Each observable of a quantized model over its quantization ensemble (docs/nulls.md, "The
quantization ensemble"; docs/analysis.md, "Reading a result against its quantization").

A member is a model group whose attribute `quantization` = {"of", "member", "ensemble"} names
the trained model (sweep.format.schema.quant_families): the model with every weight moved
within its own rounding bin, swept on the first sequences of the model's tokens. Per observable
the trained value is set beside the members' values: their min, max and sd (k − 1 degrees of
freedom), and how far the trained value lies from the members' range, in units of that sd.

A trained-vs-null verdict stands with the ensemble only when it holds at every member: each
member's observable is compared with the same nulls in the same way as the trained value
(studies/nulls.py NullComparison, its own interval and p), and the ensemble's p of an
observable is the largest of the trained and the members' raw p (an intersection-union test:
"Δ ≠ 0 at every member" is rejected at level α only where each member rejects at α, Berger
1982); those p are adjusted by Holm over the model's observables (multiplicity.py), and the
verdict reads "stands" only where that adjusted p is below 1 − level with every Δ of the
trained value's sign.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis.fit.multiplicity import Family
from analysis.studies.nulls import NullComparison, observables


@dataclass
class Spread:
    """One observable of one model over its ensemble; `against_nulls` when it has nulls."""
    observable: str
    trained: object                   # nulls.Estimate
    members: dict                     # {member name: nulls.Estimate}
    against_nulls: dict = field(default_factory=dict)   # {trained or member name: NullComparison}
    p_ensemble: float = np.nan        # max of the raw p of the trained value and every member
    p_adjusted: float = np.nan        # that p, Holm over the model's observables
    level: float = 0.9

    @property
    def values(self) -> np.ndarray:
        return np.array([e.value for e in self.members.values()], np.float64)

    @property
    def sd(self) -> float:
        v = self.values
        return float(v.std(ddof=1)) if len(v) > 1 else np.nan

    @property
    def same_sign(self) -> bool:
        signs = {np.sign(c.delta) for c in self.against_nulls.values()}
        return len(signs) == 1 and 0 not in signs

    @property
    def verdict(self) -> str:
        if not self.against_nulls:
            return "no nulls"
        if not np.isfinite(self.p_adjusted):
            return "not measured"
        stands = self.p_adjusted < 1 - self.level and self.same_sign
        return ("stands at every member" if stands else "does not hold at every member") + \
            f" at {self.level * 100:g} %"

    def to_dict(self) -> dict:
        v = self.values
        return {"observable": self.observable, "trained": vars(self.trained),
                "members": {k: vars(e) for k, e in self.members.items()},
                "min": float(v.min()), "max": float(v.max()), "sd": self.sd,
                "against_nulls": {k: {"delta": c.delta, "ci": [c.lo, c.hi], "p_raw": c.p_raw}
                                  for k, c in self.against_nulls.items()},
                "p_ensemble": self.p_ensemble, "p_adjusted": self.p_adjusted,
                "level": self.level, "verdict": self.verdict}


@dataclass
class EnsembleStudy:
    """Every observable of one quantized model over its ensemble (module doc)."""
    model: str
    layer: int
    L: int
    members: list
    spreads: list = field(default_factory=list)          # [Spread]
    family: Family | None = None

    def to_dict(self) -> dict:
        return {"model": self.model, "layer": self.layer, "L": self.L, "members": self.members,
                "method": __doc__.split("\n\n")[1] + "\n\n" + __doc__.split("\n\n")[2],
                "observables": [s.to_dict() for s in self.spreads],
                "family": None if self.family is None else self.family.to_dict()}


def ensemble_study(st, layer, L, settings, primary) -> EnsembleStudy | None:
    """Model `st`'s observables at (layer, L) over its quantization ensemble; None without one."""
    members = st.ensemble
    if not members:
        return None
    trained, law = observables(st, layer, L, settings, primary)
    by_member = {m: observables(st.model(m), layer, L, settings, primary, law)[0] for m in members}
    by_null = {n: observables(st.model(n), layer, L, settings, primary, law)[0] for n in st.nulls}
    study = EnsembleStudy(st.name, layer, L, members)
    for name, est in trained.items():
        got = {m: obs[name] for m, obs in by_member.items() if name in obs}
        if len(got) < len(members):
            continue                          # a member that lacks it: no spread to report
        spread = Spread(name, est, got, level=settings.level)
        nulls = {n: obs[name] for n, obs in by_null.items() if name in obs}
        if nulls:
            for who, e in {st.name: est, **got}.items():
                spread.against_nulls[who] = NullComparison(who, name, e, nulls, settings.level)
            p = [c.p_raw for c in spread.against_nulls.values()]
            spread.p_ensemble = float(max(p)) if np.all(np.isfinite(p)) else np.nan
        study.spreads.append(spread)
    tested = [s for s in study.spreads if np.isfinite(s.p_ensemble)]
    if tested:
        study.family = Family(f"{st.name} with its quantization ensemble against its nulls",
                              {"observables": len(tested)}, settings.level)
        tests = [study.family.add(s.observable, *_interval_of(s), dof=_worst(s).dof) for s in tested]
        study.family.correct()
        for s, t in zip(tested, tests):
            s.p_adjusted = t.p_adjusted
    return study


def _worst(s: Spread) -> NullComparison:
    """The comparison (trained value or member) that gave the ensemble's p."""
    return max(s.against_nulls.values(), key=lambda c: c.p_raw)


def _interval_of(s: Spread) -> tuple[float, float, float]:
    """(d, lo, hi) of the comparison that gave the ensemble's p: the family reads its raw p
    back from that interval with the same t(k − 1) (`dof=`), so it is p_ensemble."""
    worst = _worst(s)
    return worst.delta, worst.lo, worst.hi
