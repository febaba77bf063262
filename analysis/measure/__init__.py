"""Measure: every registered study of a store, one immutable `Analysis`.

    from analysis.measure import measure
    a = measure("out/run.zarr")            # {model: ModelAnalysis}, a.family, a.comparison, …

Rooms: analysis.py (the result types), registry.py (the studies, in the order they run),
model.py and figures.py (one model's studies), across.py (the studies that span the
models), run.py (`measure`).
"""
from analysis.measure.run import measure  # noqa: F401 (the room's one entry)
