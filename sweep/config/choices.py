"""The allowed values of the config's compute fields, owned here and imported by the stages
that act on them (the worker's CPU library choice). Imports no YAML and no Dask, so block math
can read them. model.dtype's values are the store format's (sweep/format/dtypes.py)."""

__all__ = ["CPU_LINALG", "DEVICES", "ENGINES"]

DEVICES = ("auto", "cpu", "cuda")                 # compute.device
ENGINES = ("auto", "generic")                     # compute.engine; auto: a kept hand-written path
CPU_LINALG = ("auto", "torch", "openblas")        # compute.cpu_linalg (sweep/numerics/linalg.py)
