"""Eigenvalues of the token-diagonal Jacobians, and J_tt along the norms' invariant directions.

The relaxation rates λ = −ln|ζ| and the mode classes are the analysis' (analysis/spectrum/rates.py):
the sweep stores ζ itself.
"""
from __future__ import annotations

import numpy as np
import torch

from sweep.numerics import linalg
from sweep.numerics.dtypes import complex_of


def eigvals(J: torch.Tensor) -> torch.Tensor:
    """(T, d, d) real -> (T, d) complex: eig(J_tt) per token, on J's device.

    LAPACK geev on CPU, one matrix at a time (torch's or scipy's, as sweep.numerics.linalg says);
    torch's CUDA eig on GPU, one batched call. A matrix with a non-finite entry gets a row
    of NaN (the ledger flags it) instead of failing the whole block.
    """
    ok = all_finite(J)                                              # (T,)
    out = torch.full(J.shape[:2], complex("nan"), dtype=complex_of(J.dtype), device=J.device)  # (T, d)
    if J.device.type == "cpu":
        # one matrix at a time, through the library sweep.numerics.linalg picks: LAPACK works on a
        # column-major copy, and a batched call copies the whole block (T x 4 MiB at
        # d = 1024, fp32: mmap'd and page-faulted anew, 10-20 us a page on the development
        # VM) where one (d, d) copy is served from reused heap
        scratch: dict = {}
        for t in torch.nonzero(ok).flatten().tolist():
            out[t] = linalg.eigvals_cpu(J[t], scratch)
    elif bool(ok.all()):
        out = torch.linalg.eigvals(J)                               # no boolean-index copy
    elif ok.any():
        out[ok] = torch.linalg.eigvals(J[ok])
    return out


def all_finite(J: torch.Tensor) -> torch.Tensor:
    """(T, d, d) -> (T,) bool: every entry of J[t] finite.

    Screened by each matrix's sum, one pass with no block-sized temporary (any NaN or inf
    entry makes the sum non-finite); only a matrix whose sum is not finite gets the exact
    entrywise test, which tells overflow of a huge but finite J apart. torch.isfinite on
    the whole block forms |J| and two boolean copies of it: 128 MiB for a 32-token fp32
    block at d = 1024, page-faulted anew every task (0.27 s per block on the development VM).
    """
    ok = torch.isfinite(J.sum(dim=(1, 2)))
    for t in torch.nonzero(~ok).flatten().tolist():
        ok[t] = bool(torch.isfinite(J[t]).all())
    return ok


def scale_direction(J: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """J (T, d, d), h (T, d) the layer's input -> ρ (T,), r (T,) in J's dtype.

    ρ_t = h_tᵀ J h_t / h_tᵀ h_t is the Rayleigh quotient along the scale direction h_t and
    r_t = ‖J h_t − ρ_t h_t‖ / ‖h_t‖ its relative residual. A block whose mixer sees h only
    through one scale-invariant norm has J h = h + O(eps/ms(h)): r ≈ 0 and an eigenvalue
    sits at ρ ≈ 1, a property of the norm rather than of the dynamics. The analysis uses
    (ρ, r) to find that mode by its eigenvector instead of by how close its value is to 1.
    """
    return rayleigh(J, h)


def shift_direction(J: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """J (T, d, d) -> ρ (T,), r (T,) along u = 𝟙/√d, LayerNorm's shift direction.

    LayerNorm subtracts the mean, so LN(h + c·𝟙) = LN(h) exactly (eps included): a pre-LN
    block whose mixers see the stream only through LayerNorms has J 𝟙 = 𝟙 — parallel
    (GPT-NeoX: a second exact ζ = 1 besides the scale mode) and sequential (GPT-2: the shift
    passes through h + attn(LN1 h) into LN2 unchanged). RMSNorm blocks have a large r here;
    the analysis decides by r alone, for every architecture.
    """
    u = torch.ones(J.shape[:2], dtype=J.dtype, device=J.device)      # (T, d); ρ, r scale-free
    return rayleigh(J, u)


def rayleigh(J: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """J (T, d, d), h (T, d) -> ρ_t = h_tᵀJh_t/h_tᵀh_t, r_t = ‖Jh_t − ρ_t h_t‖/‖h_t‖ in J's dtype."""
    h = h.to(J.dtype)
    Jh = torch.einsum("tij,tj->ti", J, h)                            # (T, d) one batched matvec
    hh = (h * h).sum(-1)                                            # (T,)
    rho = (h * Jh).sum(-1) / hh                                     # (T,)
    resid = torch.linalg.vector_norm(Jh - rho[:, None] * h, dim=-1) / hh.sqrt()   # (T,)
    return rho, resid


def henrici(frobenius2: np.ndarray, eig: np.ndarray) -> np.ndarray:
    """(T,) Henrici's relative departure from normality of J_tt from ‖J_tt‖_F² (T,) and its
    eigenvalues (T, d): sqrt(max(0, ‖J‖_F² − Σ|ζ_i|²)) / ‖J‖_F, 0 for a normal matrix."""
    fro2 = np.asarray(frobenius2, np.float64)
    gap = fro2 - (np.abs(eig.astype(np.complex128)) ** 2).sum(axis=-1)
    return np.sqrt(np.maximum(gap, 0.0) / fro2)
