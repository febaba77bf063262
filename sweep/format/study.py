"""The study a config declares before it is swept, as the store records it.

A `study:` section names one family of tests, fixed before any number exists: the level
(family-wise, Holm), the layers, the observables (names from `OBSERVABLES`, documented in
docs/analysis.md) and the null kinds each observable is tested against. The sweep records
the declaration in the store's root attributes when it starts (`STUDY`, with its identity
and the time), and appends every later, different declaration to `HISTORY`; `tdos analyze`
tests exactly the recorded family and labels every other number exploratory.

A declaration recorded when the store already held finished blocks of a declared layer is
"declared after the data" (`after_data`), and the report says so at its top.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from sweep.format.fields import FieldError, option

STUDY = "study"                 # root attribute: the declaration in force (`Study.record`)
HISTORY = "study_history"       # root attribute: every declaration recorded, oldest first

# the declarable observables: name -> what it is (docs/analysis.md, "Declarable observables").
# Every name here has one measuring function in analysis's registry, and a test holds the two
# equal.
OBSERVABLES = {
    "beta": "the primary β (a window slope where the power law is rejected) at the layer, "
            "representative L",
    "density": "stable modes in the fit window per token",
    "tail_width": "ln(λ_50 / λ_10) of each token's stable rates, averaged over tokens: the "
                  "infrared tail's width in e-folds, unchanged when every rate is multiplied by "
                  "one constant, ln 5 / (1 + β) for ρ ∝ λ^β",
    "log_frobenius": "ln ‖J_tt‖_F² averaged over tokens",
    "nonnormality": "Henrici's relative departure from normality of J_tt, averaged over tokens",
    "alignment": "ln of the cross-layer alignment of the stacked kernel (a store swept with "
                 "depth:)",
    "kernel_nonnormality": "ln of the stacked kernel's non-normality (a store swept with depth:)",
}
REQUIRED = ("beta", "density")  # every study declares at least the primary and the density
NEEDS_DEPTH = ("alignment", "kernel_nonnormality")   # measured on stacked blocks: `depth:`


class StudyError(FieldError):
    """One line, `study.<field>: <what> — <fix>`."""


def _bad(field, what, fix):
    raise StudyError(f"study.{field}: {what} — {fix}")


@dataclass(frozen=True)
class Study:
    """One declared family of tests (the config's `study:` section; its fields declared
    once, sweep/format/fields.py)."""
    layers: tuple = option((), "the layers tested, each swept by every model",
                           kind="list of layer indices", default_text="required")
    observables: tuple = option(
        REQUIRED, "what is tested at each layer: names from the declarable list, at least "
        f"{' and '.join(REQUIRED)}", kind="list of " + " \\| ".join(f"`{o}`" for o in OBSERVABLES),
        see="analysis.md")
    # null kinds, each swept beside every model: a list (every observable against each) or
    # {observable: [kinds]} (each observable against its own; kept as sorted (name, kinds) pairs)
    against: tuple | dict = option(
        (), "the null kinds each observable is tested against, each swept with at least 2 seeds "
        "by every model: a list (every observable against each) or a mapping {observable: "
        "[kinds]}", kind="list or mapping of null kinds", default_text="required",
        see="nulls.md")
    level: float = option(0.95, "family-wise confidence level: Holm over every declared "
                          "(observable, layer, kind)", kind="number in (0, 1)")

    def __post_init__(self):
        for name in ("layers", "observables"):
            value = getattr(self, name)
            object.__setattr__(self, name, tuple([value] if isinstance(value, (str, int)) else value))
        against = self.against
        if isinstance(against, dict):
            against = tuple(sorted((str(o), tuple(k) if isinstance(k, (list, tuple)) else (k,))
                                   for o, k in against.items()))
        elif isinstance(against, str):
            against = (against,)
        object.__setattr__(self, "against", tuple(against))
        self.check()

    @property
    def per_observable(self) -> bool:
        return bool(self.against) and isinstance(self.against[0], tuple)

    def kinds(self, observable: str) -> tuple:
        """The null kinds `observable` is tested against."""
        if self.per_observable:
            return dict(self.against).get(observable, ())
        return self.against

    def tests(self) -> list[tuple[str, int, str]]:
        """Every declared test (observable, layer, kind), in the family's order."""
        return [(o, layer, k) for o in self.observables for layer in sorted(set(self.layers))
                for k in self.kinds(o)]

    def check(self) -> "Study":
        """Raise StudyError naming the first bad field; return self."""
        if not isinstance(self.level, (int, float)) or not 0 < self.level < 1:
            _bad("level", f"must lie strictly between 0 and 1, got {self.level!r}", "e.g. 0.95")
        if not self.layers or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                      for x in self.layers):
            _bad("layers", f"expected a list of layer indices >= 0, got {list(self.layers)}",
                 "e.g. [7, 15, 22]")
        unknown = [o for o in self.observables if not isinstance(o, str) or o not in OBSERVABLES]
        if unknown:
            _bad("observables", f"unknown {unknown[0]!r}",
                 f"choose from {', '.join(OBSERVABLES)} (docs/analysis.md)")
        missing = [o for o in REQUIRED if o not in self.observables]
        if missing:
            _bad("observables", f"{missing[0]!r} is missing",
                 f"every study declares {' and '.join(REQUIRED)}")
        kinds = [k for o in self.observables for k in self.kinds(o)]
        if not kinds or not all(isinstance(k, str) for k in kinds):
            _bad("against", f"expected a list of null kinds (or one per observable), got "
                 f"{self.against!r}", "e.g. [random_init, shuffled, gaussian]")
        if self.per_observable:
            stray = [o for o, _ in self.against if o not in self.observables]
            if stray:
                _bad(f"against.{stray[0]}", "is not a declared observable",
                     f"declare it under study.observables or remove it")
        return self

    def declaration(self) -> dict:
        """The declaration as JSON, in a canonical order."""
        return {"level": float(self.level), "layers": sorted(set(int(x) for x in self.layers)),
                "observables": list(dict.fromkeys(self.observables)),
                "against": ({o: list(k) for o, k in self.against} if self.per_observable
                            else list(dict.fromkeys(self.against)))}

    @property
    def id(self) -> str:
        """sha256 of the canonical declaration: equal declarations share it."""
        text = json.dumps(self.declaration(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def record(self, declared: str, after_data: bool) -> dict:
        """The root attribute `study`: the declaration, its id, when it was recorded (ISO 8601,
        UTC) and whether the store already held finished blocks of a declared layer then."""
        return {**self.declaration(), "id": self.id, "declared": declared,
                "after_data": bool(after_data)}

    @classmethod
    def from_record(cls, rec) -> "Study":
        return cls(layers=tuple(rec["layers"]), observables=tuple(rec["observables"]),
                   against=rec["against"], level=float(rec["level"]))
