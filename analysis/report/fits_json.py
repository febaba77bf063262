"""fits.json: every number of an `Analysis` in machine-readable form, with the settings it was
computed under. Paths are relative (`portable`): the store's to this file's folder, every
other path to the store, so a committed result names no machine."""
from __future__ import annotations

import json
import math
import os
from pathlib import PurePosixPath

import numpy as np

from analysis.report.text import symmetry_sentences
from sweep.format.settings import MODES

MODE_COUNTS = {"all-stable": "every eigenvalue with 0 < |ζ| < 1, nothing removed (the paper's count)",
               "symmetry-removed": "also drops each token's norm-invariant-direction modes and |λ| "
                                   "below the marginal threshold"}
ESTIMATORS = {"beta": "cumulative fit: least squares of log N(<λ) on log λ at the grid points in "
                      "the window (the paper's estimator; counts the modes below the window too)",
              "mle_beta": "in-window MLE: exponent of the density λ^β of the modes inside the "
                          "window (blind to modes below it)"}
PATHS = ("`store`: relative to the folder of this file; every other path: relative to the store")


def clean_json(o):
    """JSON-safe: NaN/inf → null, numpy scalars → Python."""
    if isinstance(o, dict):
        return {str(k): clean_json(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [clean_json(v) for v in o]
    if isinstance(o, (np.floating, float)):
        return float(o) if math.isfinite(o) else None
    if isinstance(o, (np.integer, np.bool_)):
        return o.item()
    return o


def json_text(doc) -> str:
    return json.dumps(clean_json(doc), indent=1)


def _absolute(s) -> bool:
    return isinstance(s, str) and "\n" not in s and PurePosixPath(s).is_absolute()


def portable(doc, store, out):
    """`doc` with its paths relative: the key "store" (anywhere) to the folder `out` the file is
    written in, every other absolute path to the store; relative paths were taken from the
    working directory, and are made relative the same way."""
    store = os.path.abspath(os.fspath(store))

    def walk(o, key=None):
        if isinstance(o, dict):
            return {k: walk(v, k) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [walk(v, key) for v in o]
        if key == "store" and isinstance(o, str):
            return os.path.relpath(os.path.abspath(o), os.path.abspath(out))
        if _absolute(o):
            return os.path.relpath(o, store)
        return o

    return walk(doc)


def headline(r):
    """The primary β at the representative (layer, L): the Headline `st.beta(layer, L)` gives."""
    return r.headline


def headline_doc(r) -> dict:
    """fits.json's headline: the Headline, what its tests read as, the window mode density at
    the same (layer, L) and the infrared sub-window beside a rejected power law."""
    h, x = r.headline, r.row().by_mode[r.primary.modes]
    return {**h.to_dict(),
            "tests_read_as": "window-slope tests" if h.power_law_rejected else "exponent tests",
            "window_mode_density": {"value": x.density, "ci": [x.density_lo, x.density_hi],
                                    "unit": x.ci_unit, "modes": r.primary.modes},
            "infrared": r.infrared}


def model_doc(r, precision=()) -> dict:
    """One model's entry of fits.json (r: ModelAnalysis; `precision`: its fp32/fp64 pairs)."""
    doc = {"arch": r.arch, "dtype": r.dtype, "layer": r.layer, "L": r.L, "why_layer": r.why_layer,
           "marginal_threshold": r.threshold, "scale_by_eigenvector": r.scale_by_eigenvector,
           "shift_by_eigenvector": r.shift_by_eigenvector, "scale_residual_max": r.scale_residual_max,
           "blocks": r.counts, "mode_counts": MODE_COUNTS, "estimators": ESTIMATORS,
           "columns_per_count": list(r.table.columns_per_count), "modes_drawn": r.modes,
           "modes": r.special, "symmetry_modes": symmetry_sentences(r), "inputs": r.inputs,
           "table1": r.table.to_dicts(), "beta_vs_depth": r.depth.to_dicts(),
           "tables_by_layer": {ly: t.to_dicts() for ly, t in r.tables.items()},
           "empty_window": {m: r.empty_window_line(m) for m in MODES},
           "rate_range": r.rate_range, "paper_reference": r.paper.values or None,
           "window_sensitivity": {m: s.to_dict() for m, s in r.sensitivity.items()},
           "laws": r.laws.to_dict() if r.laws is not None else None,
           "outside_bins": r.spectra.outside_bins}
    if r.decay is not None:
        doc["outside_bins_ssm"] = r.decay.outside_bins
        doc["decay"] = r.decay.info
        if r.decay.a_log_shift is not None:
            doc["a_log_shift"] = r.decay.a_log_shift
    if precision:
        doc["precision"] = [p.to_dict() for p in precision]
    if r.stacks is not None:
        doc["depth"] = r.stacks.to_dict()
    if r.memory is not None:
        doc["memory"] = r.memory.to_dict()
    doc["primary"] = {"estimator": r.primary.estimator, "modes": r.primary.modes,
                      "why": r.primary.why, "headline": headline_doc(r)}
    if r.nulls is not None:
        doc["nulls"] = r.nulls.to_dict()
    if r.nulls_depth is not None:
        doc["nulls_across_depth"] = r.nulls_depth.to_dict()
    return {**doc, **_unrendered(r.results, MODEL_RENDERED)}


# the registered studies this file writes under names of its own; any other study's result
# is written under its registered name (registry.py), so a new study is never left out
MODEL_RENDERED = {"tables", "depth", "mode_counts", "headline", "infrared", "sensitivity",
                  "spectra", "decay", "laws", "stacks", "memory", "nulls", "null_bands",
                  "nulls_depth", "ensemble", "ensemble_depth", "paper"}
STORE_RENDERED = {"floors", "precision", "comparison", "family"}


def _unrendered(results, rendered) -> dict:
    return {k: v.to_dict() for k, v in results.items()
            if k not in rendered and hasattr(v, "to_dict")}


def fits_doc(a, out) -> dict:
    """fits.json of Analysis `a`, written into folder `out`."""
    doc = {"store": a.store, "paths": PATHS, "window": list(a.settings.window),
           "settings": a.settings.to_dict(),
           "models": {n: model_doc(r, precision_of(a, n)) for n, r in a.items()}}
    if a.family is not None:
        doc["family"] = a.family.to_dict()
    if a.comparison is not None:
        doc["comparison"] = a.comparison.to_dict()
    if a.study is not None:        # study, positions_dropped, density_shape, beta_by_position, …
        doc.update(a.study.to_dict())
    ensembles = {n: r.ensemble.to_dict() for n, r in a.items() if r.ensemble is not None}
    if ensembles:
        doc["ensembles"] = ensembles
    across = {n: r.ensemble_depth.to_dict() for n, r in a.items() if r.ensemble_depth is not None}
    if across:
        doc["ensembles_across_depth"] = across
    return portable({**doc, **_unrendered(a.results, STORE_RENDERED)}, a.store, out)


def precision_of(a, name) -> list:
    """The fp32/fp64 pairs model `name` is a side of."""
    return [p for p in a.precision if name in p.names]
