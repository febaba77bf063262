"""The studies that span a store's models, each a function of an `AnalysisContext` (registered in
analysis/measure/registry.py): the fp32 resolution floors (before the models), the precision
pairs, the comparison of several models and the family of tests (after them)."""
from __future__ import annotations

from dataclasses import dataclass

from analysis.fit.multiplicity import Family
from analysis.studies.compare import compare_models
from analysis.studies.precision import compare_precision, measured_floors, precision_pairs
from analysis.studies.study_section import measure_study


class AnalysisContext:
    """What a store-wide study reads: the store's path, the settings, the trained models'
    Store groups (`stores`, in store order), every model's study results so far (`models`:
    {name: {study: result}}) and the store-wide results so far (`results`)."""

    def __init__(self, path, settings, stores, progress=False):
        self.path, self.settings, self.stores, self.progress = path, settings, stores, progress
        self.models: dict = {name: {} for name in stores}
        self.results: dict = {}


@dataclass(frozen=True)
class Settled:
    """A store-wide result that also settles one result of some models: the family of tests,
    whose counted null studies replace the models' uncounted ones (`models`: {name: {study:
    result}}). The analysis is built once, from the settled results."""
    value: object
    models: dict


def floors(a: AnalysisContext) -> dict:
    """{model: {layer: (λ*, how)}}: the fp32 resolution each lower-precision model's all-stable
    count is read above, measured against its fp64 twin (studies/precision.py)."""
    return measured_floors(a.stores)


def precision(a: AnalysisContext) -> list:
    """[PrecisionComparison]: every checkpoint swept in two dtypes, matched token by token at
    the pair's layer, at the Table I lengths of the reference's layer."""
    out = []
    s = a.settings
    for ref, other, layer in precision_pairs(a.stores):
        lengths = [r.L for r in a.models[ref]["tables"][layer].rows]
        out.append(compare_precision(a.path, None, ref, other, layer=layer, lengths=lengths,
                                     window=s.window, modes=s.modes, skip=s.skip_positions))
    return out


def comparison(a: AnalysisContext):
    """The comparison of several models (`tdos compare` on the store), with the null studies
    each model measured (made once, counted once); None for one model."""
    if len(a.stores) < 2:
        return None
    nulls = {n: r["nulls"] for n, r in a.models.items() if r.get("nulls") is not None}
    return compare_models([f"{a.path}:{n}" for n in a.stores], a.settings, nulls,
                          f"tdos analyze of {len(a.stores)} models")


def family(a: AnalysisContext) -> Settled:
    """The report's family of tests: the comparison's with several models, else the one
    model's observables against its nulls; every null study counted in it."""
    c = a.results.get("comparison")
    if c is not None:
        return Settled(c.family, {n: {"nulls": ns} for n, ns in c.nulls.items()})
    (name,) = a.stores
    ns = a.models[name].get("nulls")
    fam = Family.counted(f"tdos analyze of {name}",
                         {"models": 1, "comparisons against nulls (observables × null kinds)":
                          len(ns.comparisons) if ns else 0}, a.settings.level,
                         ns.entries() if ns else [])
    return Settled(fam, {name: {"nulls": ns.counted(fam.tests, fam.m)}} if ns else {})


def study(a: AnalysisContext):
    """The study's section (issue 56): the declared family of tests, tested as one Holm family,
    the positions the BOS rule dropped, the density's shape and β per position bin of each
    model, fp32 − fp64 of every declared observable (studies/study_section.py)."""
    return measure_study(a.path, a.settings)
