"""Which library does the CPU's dense linear algebra: torch's own BLAS/LAPACK or numpy/scipy's.

torch's x86 wheels bundle MKL; numpy and scipy bundle OpenBLAS. Which is faster depends on
the CPU: on the development VM's AMD EPYC (benchmarks/README.md, "Which library") OpenBLAS
does the (1024, 2048)@(2048, 1024) J_tt product faster than MKL in four runs out of four
(fp32 by 2-14 %, fp64 by 5-21 %) and fp64 eig by 3-15 %, while MKL is faster at fp32 eig
(0.30 s against 0.33 s per 1024 x 1024 matrix).

`compute.cpu_linalg` picks: "torch" or "openblas" for every operation, or "auto", which each
single-threaded worker resolves from its own CPU vendor by the table below (unmeasured
vendors, and processes running torch on several threads, keep torch).
The rule is a function of the machine alone, never of a timing, so a block recomputed on the
same kind of machine (a resumed sweep, a task rerun after its worker died) is bit-identical.
GPU tensors always go through torch.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
from pathlib import Path

import numpy as np
import torch

from sweep.config.choices import CPU_LINALG

OPS = ("gemm", "eig32", "eig64")
# per CPU vendor, the library measured faster for each operation (benchmarks/README.md)
AUTO = {"AuthenticAMD": {"gemm": "openblas", "eig32": "torch", "eig64": "openblas"}}

# {op: library} in effect; None: "auto" for this machine (library users' default); a sweep
# task sets its config's choice
_libraries: contextvars.ContextVar[dict | None] = contextvars.ContextVar("tdos_cpu_linalg", default=None)


@functools.cache
def cpu_vendor() -> str:
    """This machine's CPU vendor id ("AuthenticAMD", "GenuineIntel", ...; "" when unknown)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def resolve(choice: str, vendor: str | None = None, threads: int | None = None) -> dict:
    """"auto" | "torch" | "openblas" -> {op: library} for gemm, eig32, eig64.

    "auto" reads the table for `vendor` (default: this CPU's) in a single-threaded process
    (`threads`, default torch's count), which is what every Dask worker is: the nanny
    starts it with OMP/MKL/OPENBLAS_NUM_THREADS=1. With several threads it keeps torch:
    OpenBLAS's and torch's thread pools then contend for the same cores (the Mamba J_tt
    took 40 % longer at 2 threads on the development VM).
    """
    if choice not in CPU_LINALG:
        raise ValueError(f"compute.cpu_linalg: {choice!r} is not one of {', '.join(CPU_LINALG)}")
    if choice != "auto":
        return dict.fromkeys(OPS, choice)
    if (torch.get_num_threads() if threads is None else threads) > 1:
        return dict.fromkeys(OPS, "torch")
    return dict(AUTO.get(cpu_vendor() if vendor is None else vendor, dict.fromkeys(OPS, "torch")))


@contextlib.contextmanager
def using(choice: str):
    """Within the block (this thread or task only), CPU matmul/eigvals follow `choice`."""
    token = _libraries.set(resolve(choice))
    try:
        yield current()
    finally:
        _libraries.reset(token)


def describe(libraries: dict) -> str:
    """{op: library} -> "gemm openblas, eig32 torch, eig64 openblas" (task results, the sweep's log)."""
    return ", ".join(f"{op} {lib}" for op, lib in libraries.items())


def current() -> dict:
    """{op: library} in effect here."""
    return dict(_current())


def _current() -> dict:
    libraries = _libraries.get()
    return resolve("auto") if libraries is None else libraries


def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """a (m, k) @ b (k, n) -> (m, n), written into `out` (C-contiguous) when given.

    Plain tensors only (not under vmap): the OpenBLAS route works on numpy views that share
    their memory, so nothing is copied. Tensors that autograd tracks stay on torch.
    """
    if a.device.type != "cpu" or _current()["gemm"] != "openblas" or a.requires_grad or b.requires_grad:
        return torch.matmul(a, b) if out is None else torch.matmul(a, b, out=out)
    if out is None:
        out = a.new_empty(a.shape[0], b.shape[1])
    np.matmul(a.numpy(), b.numpy(), out=out.numpy())
    return out


def eigvals_cpu(m: torch.Tensor, scratch: dict | None = None) -> torch.Tensor:
    """One real (d, d) CPU matrix -> its d complex eigenvalues (LAPACK geev), m untouched.

    The OpenBLAS route runs scipy's geev in place on a Fortran-ordered copy kept in
    `scratch` across calls (the copy is what LAPACK would make anyway; reusing it spares a
    fresh page-faulted buffer per matrix).
    """
    op = "eig64" if m.dtype == torch.float64 else "eig32"
    if _current()[op] != "openblas" or m.requires_grad:
        return torch.linalg.eigvals(m)
    import scipy.linalg

    src = m.numpy()
    a = None if scratch is None else scratch.get("eig")
    if a is None or a.shape != src.shape or a.dtype != src.dtype:
        a = np.empty(src.shape, dtype=src.dtype, order="F")
        if scratch is not None:
            scratch["eig"] = a
    a[...] = src
    return torch.from_numpy(scipy.linalg.eigvals(a, check_finite=False, overwrite_a=True))
