"""fits.json: every fitted number of `tdos analyze` in machine-readable form, with the
settings it was computed under."""
from __future__ import annotations

import json
import math
import os

import numpy as np

from analysis.studies.paper import reference
from analysis.studies.primary import headline_of
from analysis.report.text import symmetry_sentences
from analysis.spectrum.rates import SCALE_RESIDUAL_MAX
from analysis.studies.tables import ROW_FIELDS
from sweep.format.settings import MODES

MODE_COUNTS = {"all-stable": "every eigenvalue with 0 < |ζ| < 1, nothing removed (the paper's count)",
               "symmetry-removed": "also drops each token's norm-invariant-direction modes and |λ| "
                                   "below the marginal threshold"}
ESTIMATORS = {"beta": "cumulative fit: least squares of log N(<λ) on log λ at the grid points in "
                      "the window (the paper's estimator; counts the modes below the window too)",
              "mle_beta": "in-window MLE: exponent of the density λ^β of the modes inside the "
                          "window (blind to modes below it)"}


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


def dump_json(doc, path):
    path.write_text(json.dumps(clean_json(doc), indent=1))
    return path


def model_doc(r) -> dict:
    """One model's entry of fits.json (r: report.ModelResult)."""
    doc = {"arch": r.arch, "dtype": r.dtype, "layer": r.layer, "L": r.L, "why_layer": r.why_layer,
           "marginal_threshold": r.threshold, "scale_by_eigenvector": r.scale_by_eigenvector,
           "shift_by_eigenvector": r.shift_by_eigenvector, "scale_residual_max": SCALE_RESIDUAL_MAX,
           "blocks": r.counts, "mode_counts": MODE_COUNTS, "estimators": ESTIMATORS,
           "columns_per_count": list(ROW_FIELDS), "modes_drawn": r.modes, "modes": r.special,
           "symmetry_modes": symmetry_sentences(r), "inputs": r.inputs,
           "table1": r.table.to_dicts(), "beta_vs_depth": r.depth.to_dicts(),
           "tables_by_layer": {ly: t.to_dicts() for ly, t in r.tables_by_layer.items()},
           "empty_window": {m: r.empty_window_line(m) for m in MODES},
           "rate_range": r.rate_range,
           "paper_reference": reference(r.identity, r.layer, r.settings) or None,
           "window_sensitivity": {m: s.to_dict() for m, s in r.sensitivity.items()},
           "laws": r.laws.to_dict() if r.laws is not None else None,
           "outside_bins": r.outside_bins}
    if r.outside_bins_ssm is not None:
        doc["outside_bins_ssm"] = r.outside_bins_ssm
        doc["decay"] = r.decay
    if r.a_log_shift is not None:
        doc["a_log_shift"] = r.a_log_shift
    if r.precision:
        doc["precision"] = r.precision
    if r.stacks is not None:
        doc["depth"] = r.stacks.to_dict()
    if r.memory is not None:
        doc["memory"] = r.memory.to_dict()
    if r.primary is not None:
        doc["primary"] = {"estimator": r.primary.estimator, "modes": r.primary.modes,
                          "why": r.primary.why, "headline": headline_doc(r)}
    if r.nulls is not None:
        doc["nulls"] = r.nulls.to_dict()
    if r.nulls_depth is not None:
        doc["nulls_across_depth"] = r.nulls_depth.to_dict()
    return doc


def headline(r):
    """The primary β at the representative (layer, L): the Headline `st.beta(layer, L)` gives
    (analysis/studies/primary.py), from the same Table I cell."""
    row = r.row()
    return headline_of(row.by_mode[r.primary.modes], r.primary, r.settings, r.name, r.layer, row.L)


def headline_doc(r) -> dict:
    """fits.json's headline: the Headline, what its tests read as, the window mode density at
    the same (layer, L) and the infrared sub-window beside a rejected power law."""
    h, x = headline(r), r.row().by_mode[r.primary.modes]
    return {**h.to_dict(),
            "tests_read_as": "window-slope tests" if h.power_law_rejected else "exponent tests",
            "window_mode_density": {"value": x.density, "ci": [x.density_lo, x.density_hi],
                                    "unit": x.ci_unit, "modes": r.primary.modes},
            "infrared": r.infrared}


def write_json(results, path, store_path, settings, comparison=None, family=None):
    doc = {"store": os.path.abspath(store_path), "window": list(settings.window),
           "settings": settings.to_dict(), "models": {n: model_doc(r) for n, r in results.items()}}
    if family is not None:
        doc["family"] = family.to_dict()
    if comparison is not None:
        doc["comparison"] = comparison.to_dict()
    return dump_json(doc, path)
