"""The allowed values of the config's enumerated fields, owned here and imported by the stages
that act on them (the worker's CPU library choice, the model's dtype). Imports no YAML and no
Dask, so block math can read them."""
from analysis.io.schema import DTYPES  # model.dtype: the dtypes a store holds

__all__ = ["CPU_LINALG", "DEVICES", "DTYPES", "ENGINES"]

DEVICES = ("auto", "cpu", "cuda")                 # compute.device
ENGINES = ("auto", "generic")                     # compute.engine; auto: a kept hand-written path
CPU_LINALG = ("auto", "torch", "openblas")        # compute.cpu_linalg (sweep/numerics/linalg.py)
