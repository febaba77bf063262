"""`measure(store, settings)`: every registered study of a store, one immutable `Analysis`.

Nothing here writes a file: `render(analysis, out)` (analysis/report/render.py) does, and
`tdos analyze` is the two in a row (analysis/report/analyze.py).
"""
from __future__ import annotations

import os

from analysis.io.aggregate import aggregate
from analysis.io.store import open_store
from analysis.measure.across import AnalysisContext, Settled
from analysis.measure.analysis import Analysis, ModelAnalysis, frozen_map
from analysis.measure.model import ModelContext
from analysis.measure.registry import REGISTRY, check
from analysis.studies.positions import resolve_skip
from analysis.studies.primary import primary_of, representative, store_settings, why_representative
from sweep.format.variants import trained_models


def measure(store, settings=None, model=None, progress=False, registry=REGISTRY) -> Analysis:
    """Every study of `registry` on the trained models of `store` (`model`: that one only),
    under `settings` (default: the store's recorded `analysis:` section). Nulls and ensemble
    members are read under their trained model, never as models of their own."""
    check(registry)
    path = os.fspath(store)
    st0 = open_store(path, model)
    settings = resolve_skip(settings or store_settings(st0), st0)    # `auto`: BOS or not, once
    names = [st0.name] if model else trained_models(st0.root)
    a = AnalysisContext(path, settings, {n: st0.model(n) for n in names}, progress)
    agg = aggregate(path, progress=None)
    for r in _of(registry, "store"):
        a.results[r.name] = r.measure(a)
    contexts = {}
    for name, st in a.stores.items():
        contexts[name] = _model_context(st, agg.model(name), settings, a.results, progress)
        for r in _of(registry, "model"):
            contexts[name].results[r.name] = r.measure(contexts[name])
        a.models[name] = contexts[name].results
    settled = {n: {} for n in names}
    for r in _of(registry, "analysis"):
        value = r.measure(a)
        if isinstance(value, Settled):
            for n, parts in value.models.items():
                settled[n].update(parts)
            value = value.value
        a.results[r.name] = value
    models = {n: _model_analysis(contexts[n], {**a.models[n], **settled[n]}) for n in names}
    results = {k: v for k, v in a.results.items() if k != "study"}
    return Analysis(path, settings, frozen_map(models), frozen_map(results),
                    a.results.get("study"))


def _of(registry, scope):
    return [r for r in registry if r.scope == scope]


def _model_context(st, agg, settings, store_results, progress) -> ModelContext:
    layer, L = representative(st, settings=settings)
    floors = (store_results.get("floors") or {}).get(st.name)
    return ModelContext(st, agg, settings, layer, L, primary_of(st, settings), floors, progress)


def _model_analysis(m: ModelContext, results: dict) -> ModelAnalysis:
    st = m.st
    return ModelAnalysis(st.name, st.arch, st.dtype, m.settings, m.layer, m.L, m.primary,
                         why_representative(st, settings=m.settings), st.identity, st.inputs,
                         st.block_counts(), frozen_map(results))
