"""Everything the study adds to an analysis, measured in one call (`measure_study`) and rendered
by its `to_dict()` into fits.json: the declared family (studies/study.py), the positions the
BOS rule dropped, and at each trained model's representative layer the density's shape against
its nulls and β per position bin, then fp32 − fp64 of every declared observable of each
precision pair. Measure, then render: the section computes everything here and its renderers
compute nothing (STYLE 16).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from analysis.io.store import Store, open_store
from analysis.studies.positions import BosRule, beta_by_position, bos_rule, resolve_skip
from analysis.studies.precision_study import precision_study
from analysis.studies.primary import primary_of, representative, store_settings
from analysis.studies.shape import density_shape
from analysis.studies.study import StudyResult, declared_study
from sweep.format.variants import families


@dataclass(frozen=True)
class StudySection:
    """The study's part of one analysis (module docstring)."""
    declared: StudyResult | None
    positions: BosRule
    shape: dict = field(default_factory=dict)          # {model: DensityShape}, models with nulls
    by_position: dict = field(default_factory=dict)    # {model: PositionBins}
    precision: tuple = ()                              # (PrecisionStudy,)

    def to_dict(self) -> dict:
        """fits.json's keys: `study` (null without a declaration), `positions_dropped`,
        `density_shape`, `beta_by_position`, `precision_of_observables`."""
        return {"study": self.declared.to_dict() if self.declared else None,
                "positions_dropped": self.positions.to_dict(),
                "density_shape": {m: s.to_dict() for m, s in self.shape.items()},
                "beta_by_position": {m: b.to_dict() for m, b in self.by_position.items()},
                "precision_of_observables": [p.to_dict() for p in self.precision]}


def measure_study(store, settings=None) -> StudySection:
    """The study's section of `store` (a path or an open Store) under `settings` (default: the
    store's recorded ones, `skip_positions: auto` resolved)."""
    st = store if isinstance(store, Store) else open_store(store)
    settings = resolve_skip(settings or store_settings(st), st)
    shape, by_position = {}, {}
    for name, kinds in families(st.root, "null").items():
        model = st.model(name)
        primary = primary_of(model, settings)
        layer, L = representative(model, settings=settings)
        by_position[name] = beta_by_position(model, layer, L, settings, primary)
        if kinds:
            shape[name] = density_shape(model, layer, L, settings, primary)
    return StudySection(declared_study(st, settings), bos_rule(st, settings), shape, by_position,
                        tuple(precision_study(st, settings)))
