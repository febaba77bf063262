"""What `measure` returns: one immutable analysis of a store (analysis/measure/run.py).

`Analysis` holds one `ModelAnalysis` per trained model and the results that span the models
(the precision pairs, the comparison, the family of tests), each made once by a registered
study (analysis/measure/registry.py) and never changed after: `render` (analysis/report/
render.py) only reads them. The study's section (issue 56: the declared family of tests of
the config's `study:`, the positions dropped, the density's shape, β per position bin, fp32 −
fp64 per declared observable; analysis/studies/study_section.py) has its own slot,
`Analysis.study`, filled by the study registered under the name "study"; its declared rows
are the verdicts report.md's answer and first table show.
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
class Analysis(Mapping):
    """One store measured under one `Settings`: {model name: ModelAnalysis} as a mapping, the
    results that span the models (`results`: one entry per registered analysis study, read as
    attributes: `a.precision`, `a.comparison`, `a.family`) and the study's section (`study`)."""
    store: str                     # the store's path as given to `measure`
    settings: object
    models: Mapping
    results: Mapping = field(default_factory=dict, repr=False)
    study: object = None           # studies/study_section.StudySection (issue 56), or None

    @property
    def declared(self):
        """The declared family of tests (studies/study.StudyResult), None where the config
        declared none: every verdict outside it is exploratory."""
        return None if self.study is None else self.study.declared

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
