"""`tdos analyze` and `tdos compare`: measure, then render.

`analyze` measures every registered study of a store into one immutable `Analysis`
(analysis/measure/run.py) and renders it into a folder (analysis/report/render.py): every
figure, Table I, fits.json and report.md. `compare` does the same for `tdos compare`.
"""
from __future__ import annotations

import os
from pathlib import Path

from analysis.measure.model import table_lengths  # noqa: F401 (public here: tests, docs)
from analysis.measure.run import measure
from analysis.report.compare import write_comparison
from analysis.report.render import render
from analysis.studies.compare import compare_models
from analysis.studies.primary import representative  # noqa: F401 (public here: tests, docs)


def analyze(store_path, out=None, settings=None, model=None, progress=True):
    """Measure `store_path` and write its full analysis into `out` (default STORE-report);
    returns the `Analysis` ({model: ModelAnalysis} as a mapping). `settings` default: the
    store's recorded `analysis:` section."""
    store_path = os.fspath(store_path)
    analysis = measure(store_path, settings, model, progress)
    render(analysis, Path(out or store_path.rstrip("/") + "-report"))
    return analysis


def compare(sources, out="compare", settings=None):
    """`tdos compare`: the models of `sources` measured side by side, written into `out`;
    returns the `Comparison`."""
    comparison = compare_models(sources, settings)
    write_comparison(comparison, out)
    return comparison
