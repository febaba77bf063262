"""What `measure` returns: one immutable analysis of a store (analysis/measure/run.py).

`Analysis` holds one `ModelAnalysis` per trained model and the results that span the models
(the precision pairs, the comparison, the family of tests), each made once by a registered
study (analysis/measure/registry.py) and never changed after: `render` (analysis/report/
render.py) only reads them. The declared family of tests (issue 56, `study:` in the config)
has its own slot, `Analysis.study`: None until a study registered under the name "study"
fills it; its rows are what report.md's first table shows as verdicts.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np


def frozen_map(d) -> Mapping:
    """A read-only view of a dict: results nobody adds to after construction."""
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class ModeCounts:
    """What each mode count leaves out at the representative (layer, L), and where the stable
    rates lie: the numbers behind report.md's modes line and fits.json's `modes`."""
    special: dict                  # {modes: class counts (tokens, scale, marginal, unstable, zero)}
    threshold: float               # the marginal threshold |λ| of the dtype
    rate_range: dict               # {modes: (lowest, highest) stable rate, to a bin}
    scale_by_eigenvector: bool     # scale mode found by ρ_t, r_t (False: an older store)
    shift_by_eigenvector: bool
    scale_residual_max: float      # the residual r below which an eigenvalue is the scale mode


@dataclass(frozen=True)
class PaperReference:
    """The papers' values beside this model (analysis/studies/paper.py): `values` {L: β} where
    checkpoint, layer and analysis are the paper's; `note` the paper's values in words where the
    checkpoint is the paper's but the setting is not (None for any other model)."""
    values: dict
    note: str | None


@dataclass(frozen=True)
class ModelAnalysis:
    """Everything measured for one trained model group. The fields are what the store says
    and where the headline sits; `results` holds one entry per registered model study, read as
    attributes (`m.table`, `m.nulls`, `m.stacks`, …; registry.py lists them)."""
    name: str
    arch: str
    dtype: str
    settings: object               # sweep.format.settings.Settings
    layer: int                     # representative layer
    L: int                         # representative length
    primary: object                # settings.Primary: the β of headlines and verdicts
    why_layer: str                 # the rule that picked the representative layer and L
    identity: dict                 # the store's record of the checkpoint
    inputs: dict                   # the store's record of what the tokens came from
    counts: dict                   # ledger: planned / done / flagged / pending
    results: Mapping = field(default_factory=dict, repr=False)

    def __getattr__(self, name):
        if name != "results" and name in self.__dict__.get("results", {}):
            return self.results[name]
        raise AttributeError(f"{type(self).__name__} has no {name!r}")

    @property
    def modes(self) -> str:
        """The mode count the figures draw."""
        return self.settings.modes

    @property
    def table(self):
        """Table I at the representative layer."""
        return self.tables[self.layer]

    @property
    def tables_by_layer(self) -> Mapping:
        return self.tables

    def row(self):
        """The Table I row at the representative L."""
        return next((x for x in self.table.rows if x.L == self.L), self.table.rows[-1])

    # the mode counts' numbers, as fields of their own (fits.json, report.md)
    special = property(lambda self: self.mode_counts.special)
    threshold = property(lambda self: self.mode_counts.threshold)
    rate_range = property(lambda self: self.mode_counts.rate_range)
    scale_by_eigenvector = property(lambda self: self.mode_counts.scale_by_eigenvector)
    shift_by_eigenvector = property(lambda self: self.mode_counts.shift_by_eigenvector)
    scale_residual_max = property(lambda self: self.mode_counts.scale_residual_max)

    def empty_window_line(self, modes) -> str | None:
        """One line when the window holds no mode of count `modes` at (layer, L), else None."""
        if self.row().by_mode[modes].fitted:
            return None
        lo, hi = self.settings.window
        a, b = self.rate_range[modes]
        where = f"its stable rates lie in [{a:.3g}, {b:.3g}]" if np.isfinite(a) else "no stable rates"
        return (f"the window [{lo:g}, {hi:g}] holds no {modes} modes at layer {self.layer}, "
                f"L = {self.L} ({where}): nothing fitted")


@dataclass(frozen=True)
class VerdictRow:
    """One test of the declared family (fits.json `study.rows`, CONTRACT.md)."""
    model: str
    observable: str                # a name of sweep.format.study.OBSERVABLES
    layer: int
    kind: str                      # the null kind it is tested against
    trained: float
    null_mean: float
    delta: float
    ci: tuple                      # (lo, hi) of Δ at the family's level
    p_raw: float
    p_method: str                  # the distribution p was read from
    p_adjusted: float              # Holm over the family
    verdict: str                   # written from the numbers by the study's rule table

    def to_dict(self) -> dict:
        return {"model": self.model, "observable": self.observable, "layer": self.layer,
                "kind": self.kind, "trained": self.trained, "null_mean": self.null_mean,
                "delta": self.delta, "ci": list(self.ci), "p": self.p_raw,
                "p_method": self.p_method, "p_holm": self.p_adjusted, "verdict": self.verdict}


@dataclass(frozen=True)
class DeclaredFamily:
    """The family of tests the config declared before the sweep (`study:`), tested as one:
    what `Analysis.study` holds once a study is registered under the name "study". Everything
    else in the report is exploratory. A study may return its own type with these fields."""
    declaration: dict              # sweep.format.study.Study.declaration()
    after_data: bool               # declared (or changed) after the sweep had data
    level: float                   # family-wise, Holm
    rows: tuple = ()               # (VerdictRow, ...)

    def for_model(self, name) -> tuple:
        return tuple(r for r in self.rows if r.model == name)

    def to_dict(self) -> dict:
        return {"declaration": self.declaration, "after_data": self.after_data,
                "level": self.level, "rows": [r.to_dict() for r in self.rows]}


@dataclass(frozen=True)
class Analysis(Mapping):
    """One store measured under one `Settings`: {model name: ModelAnalysis} as a mapping, the
    results that span the models (`results`: one entry per registered analysis study, read as
    attributes: `a.precision`, `a.comparison`, `a.family`) and the declared family (`study`)."""
    store: str                     # the store's path as given to `measure`
    settings: object
    models: Mapping
    results: Mapping = field(default_factory=dict, repr=False)
    study: object = None           # DeclaredFamily (issue 56) or None: nothing declared

    def __getitem__(self, name) -> ModelAnalysis:
        return self.models[name]

    def __iter__(self):
        return iter(self.models)

    def __len__(self) -> int:
        return len(self.models)

    def __getattr__(self, name):
        if name != "results" and name in self.__dict__.get("results", {}):
            return self.results[name]
        raise AttributeError(f"{type(self).__name__} has no {name!r}")

    __hash__ = object.__hash__
