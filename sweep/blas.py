"""The faster of the two CPU BLAS libraries at hand for the per-token J_tt product, by measurement.

torch's CPU wheels call MKL, numpy's call OpenBLAS. MKL is the usual winner on Intel CPUs;
on AMD ones (the development VM is an EPYC, family 25) it runs a slower GEMM path and
OpenBLAS is 10-20 % faster for the (d, d_inner) x (d_inner, d) product at d = 1024
(benchmarks/README.md). The first product of each (shapes, dtype, torch threads) in a
process times both, alternately, and keeps the faster; both are plain GEMMs in the same
dtype, so they agree to rounding. CUDA tensors always stay with torch.

The race is fair: numpy's OpenBLAS is first set to torch's thread count (numpy's bundled
OpenBLAS exports a setter; where none is found, e.g. no /proc or another BLAS, torch is used).
"""
from __future__ import annotations

import ctypes
import re
import time
from pathlib import Path

import numpy as np
import torch

CALIBRATION_ROUNDS = 3          # alternating timed calls of each library, the minimum kept

_choice: dict[tuple, str] = {}


def _torch_mm(a, b, out):
    torch.matmul(a, b, out=out)


def _numpy_mm(a, b, out):
    np.matmul(a.numpy(), b.numpy(), out=out.numpy())


_LIBS = {"torch": _torch_mm, "numpy": _numpy_mm}


def matmul_into(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """out = a @ b for 2-D tensors (out contiguous), with the faster BLAS of this process."""
    if out.device.type != "cpu" or a.requires_grad or b.requires_grad:
        return torch.matmul(a, b, out=out)
    key = (tuple(a.shape), tuple(b.shape), a.dtype, torch.get_num_threads())
    lib = _choice.get(key)
    if lib is None:
        lib = _choice[key] = _calibrate(a, b, out)
    _LIBS[lib](a, b, out)
    return out


_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads")


def _set_numpy_threads(n: int) -> bool:
    """Set every loaded OpenBLAS (numpy's among them) to n threads; False if none was found."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return False
    done = False
    for lib in set(re.findall(r"(/\S*openblas\S*\.so\S*)", maps)):
        so = ctypes.CDLL(lib)
        setter = next((getattr(so, name) for name in _SETTERS if hasattr(so, name)), None)
        if setter is not None:
            setter(ctypes.c_int(n))
            done = True
    return done


def _calibrate(a, b, out) -> str:
    if not _set_numpy_threads(torch.get_num_threads()):
        return "torch"
    best = dict.fromkeys(_LIBS, float("inf"))
    for _ in range(CALIBRATION_ROUNDS):
        for name, mm in _LIBS.items():
            t = time.perf_counter()
            mm(a, b, out)
            best[name] = min(best[name], time.perf_counter() - t)
    return min(best, key=best.get)


def choices() -> dict:
    """{(shapes, dtype, threads): library} decided so far in this process (for reports)."""
    return dict(_choice)
