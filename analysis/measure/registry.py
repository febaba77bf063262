"""The registry of studies: every number `tdos analyze` reports is made by one registered study,
in the order below. Adding a study is one registration: one row of `REGISTRY`, naming its
function. Its result is then `ModelAnalysis.<name>` (scope "model": one per trained model) or
`Analysis.<name>` (scope "store": before the models, "analysis": after them), and fits.json
carries its `to_dict()` under its name (render.py) until a renderer of its own is written.

    scope     the function takes        it may read
    "store"   AnalysisContext           the store's models (Store groups), the settings
    "model"   ModelContext              one model's store, aggregate, representative (layer, L),
                                        primary, and the model studies above it (`m.results`)
    "analysis" AnalysisContext          every model's results, the store-wide results above it

A study returns one immutable result and writes nothing. A store-wide study may settle a
model's result (`across.Settled`): the family of tests counts the models' null studies.

The study of issue 56 fills `Analysis.study` through the registration named "study" (its
result a studies/study_section.StudySection: the declared family, whose verdicts report.md's
answer and first table show, and the study's exploratory numbers, which fits.json carries).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import analysis.measure.across as across
import analysis.measure.figures as figures
import analysis.measure.model as model

SCOPES = ("store", "model", "analysis")


@dataclass(frozen=True)
class Registration:
    """One study: the result it makes (`name`), when it runs (`scope`), the function that
    measures it and what it measures, in a line (docs/api.md lists them)."""
    name: str
    scope: str
    measure: Callable
    about: str


REGISTRY = (
    Registration("floors", "store", across.floors,
                 "fp32 resolution floors, measured against an fp64 twin of the same checkpoint"),
    Registration("tables", "model", model.tables,
                 "Table I at every swept layer: both β estimators and both mode counts per L"),
    Registration("depth", "model", model.depth, "β across depth at the representative L"),
    Registration("mode_counts", "model", model.mode_counts,
                 "what each mode count leaves out at the representative (layer, L)"),
    Registration("headline", "model", model.headline,
                 "the primary β at the representative (layer, L), as `st.beta` gives it"),
    Registration("infrared", "model", model.infrared,
                 "the primary count's in-window MLE on the window without its top decade"),
    Registration("sensitivity", "model", model.sensitivity,
                 "β as each window edge moves, and the local exponent"),
    Registration("spectra", "model", figures.spectra,
                 "the spectra, K(t) and goodness of fit Figs 1, 5, 6 and the window figure draw"),
    Registration("decay", "model", figures.decay,
                 "Figs 2–4: the intrinsic and effective rates of the layer with a learned decay"),
    Registration("laws", "model", model.laws, "App. B's self-averaging and K(t) laws"),
    Registration("stacks", "model", model.stacks, "stacked blocks (a store swept with depth:)"),
    Registration("memory", "model", model.memory, "token memory (a store swept with memory:)"),
    Registration("nulls", "model", model.nulls,
                 "every observable against the model's nulls, one kind at a time"),
    Registration("null_bands", "model", figures.null_bands,
                 "the trained TDOS over each null kind's band (tdos_vs_nulls.png)"),
    Registration("nulls_depth", "model", model.nulls_depth,
                 "β and the window mode density against the nulls at every shared layer"),
    Registration("ensemble", "model", model.ensemble,
                 "every observable over the quantization ensemble, and its null verdicts"),
    Registration("ensemble_depth", "model", model.ensemble_depth,
                 "β and the window mode density over the ensemble at every layer it was swept"),
    Registration("paper", "model", model.paper, "the papers' values where they apply"),
    Registration("precision", "analysis", across.precision,
                 "one checkpoint in fp32 and fp64, matched token by token"),
    Registration("comparison", "analysis", across.comparison,
                 "several models on shared axes, Δβ of every pair (tdos compare)"),
    Registration("family", "analysis", across.family,
                 "the report's family of tests, Holm-corrected; the null studies counted in it"),
    Registration("study", "analysis", across.study,
                 "the declared family of tests (study:) and the study's exploratory numbers"),
)


def registered(scope: str) -> list[Registration]:
    """The registrations of one scope, in the order they run."""
    if scope not in SCOPES:
        raise ValueError(f"scope {scope!r}: expected one of {SCOPES}")
    return [r for r in REGISTRY if r.scope == scope]


def check(registry=REGISTRY) -> None:
    """One name per study, a known scope each: a registry a second study cannot shadow."""
    names = [r.name for r in registry]
    dup = sorted({n for n in names if names.count(n) > 1})
    bad = [r.name for r in registry if r.scope not in SCOPES]
    if dup or bad:
        raise ValueError(f"registry: names used twice {dup}, unknown scopes at {bad}")
