"""The compute dtypes a sweep runs in (`model.dtype`), one row each: the config checks the
names, the worker maps them to torch, the budget sizes them, the store's arrays take their
dtypes from them, and the self-check, the held-prefix check and the mode counts take their
bounds from them.

torch is named by attribute (`Dtype.torch`), never imported: the store format imports no torch.
sweep/numerics/dtypes.py turns a row into a torch dtype, in one place.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Dtype:
    """One compute dtype and what follows from it."""
    name: str              # numpy's name, the config's `model.dtype`, a store group's dtype
    torch: str             # the attribute of the torch module
    complex: str           # numpy name of its eigenvalues' dtype (the store's complex arrays)
    # |λ| below this is "numerically marginal": |ζ| = 1 up to rounding (a mode the solver put
    # on the unit circle to within ~2% of float32 spacing at 1, or eps64·κ·||J|| in fp64).
    # Physical slow modes in the paper reach ≈1e-7 (fp32) and ≈1e-8 (fp64), so both floors sit
    # two decades below the physical tail and six below the fit window (1e-4)
    marginal: float
    # largest relative difference of the engine's J_tt from autograd of transformers' layer
    # (sweep/generic/selfcheck.py): room above the largest difference between two correct
    # routes on every tested family (transformers rounds RMSNorm variances and A_log to
    # float32 inside float64 models)
    selfcheck: float
    # largest |copy − real| / max |real| of a layer output accepted as the same call by the
    # held-prefix check (sweep/generic/decode.py)
    held_prefix: float

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(self.name)

    @property
    def eps(self) -> float:
        """Spacing of the floats at 1."""
        return float(np.finfo(self.name).eps)

    @property
    def bytes(self) -> int:
        """Per real value."""
        return self.numpy.itemsize

    @property
    def complex_bytes(self) -> int:
        """Per complex value (an eigenvalue)."""
        return np.dtype(self.complex).itemsize


DTYPES = {d.name: d for d in (
    Dtype("float32", "float32", "complex64", marginal=1e-9, selfcheck=1e-3, held_prefix=1e-4),
    Dtype("float64", "float64", "complex128", marginal=1e-10, selfcheck=1e-5, held_prefix=1e-9),
)}
NAMES = tuple(DTYPES)              # ("float32", "float64"): the allowed `model.dtype`


def row(name: str) -> Dtype:
    """The row of compute dtype `name`; a ValueError naming the allowed ones otherwise."""
    if name not in DTYPES:
        raise ValueError(f"dtype {name!r} is not supported; use {' or '.join(NAMES)}")
    return DTYPES[name]


def of(dtype) -> Dtype:
    """The row of a numpy dtype (or its name), real or complex: complex64 → float32's row."""
    dt = np.dtype(dtype)
    for d in DTYPES.values():
        if dt in (d.numpy, np.dtype(d.complex)):
            return d
    raise ValueError(f"dtype {dt} is neither a compute dtype ({', '.join(NAMES)}) nor its "
                     f"complex partner")
