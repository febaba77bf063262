"""The compute dtypes in torch: the one place a row of the store format's dtype table
(sweep/format/dtypes.py, which imports no torch) becomes a torch dtype, and back."""
from __future__ import annotations

import torch

from sweep.format import dtypes
from sweep.format.dtypes import Dtype


def torch_dtype(name: str) -> torch.dtype:
    """torch's dtype of compute dtype `name` ("float32" → torch.float32); a ValueError naming
    the supported ones otherwise."""
    return getattr(torch, dtypes.row(name).torch)


def row_of(dtype: torch.dtype) -> Dtype:
    """The table's row of a real torch dtype (a tensor's, a model's parameters')."""
    for d in dtypes.DTYPES.values():
        if getattr(torch, d.torch) == dtype:
            return d
    raise ValueError(f"{dtype} is not a compute dtype ({', '.join(dtypes.NAMES)})")


def complex_of(dtype: torch.dtype) -> torch.dtype:
    """The complex dtype of a real compute dtype's eigenvalues (torch.float32 → torch.complex64:
    torch names its complex dtypes as numpy does)."""
    return getattr(torch, row_of(dtype).complex)
