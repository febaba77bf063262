"""Eigenvalues of the token-diagonal Jacobians, and the relaxation rates they define."""
from __future__ import annotations

import numpy as np
import torch


def eigvals(J: torch.Tensor, device=None) -> torch.Tensor:
    """(T, d, d) real -> (T, d) complex: eig(J_tt) per token, on J's device or `device`.

    LAPACK geev on CPU, torch's CUDA eig on GPU; the result comes back on J's device.
    A matrix with a non-finite entry gets a row of NaN (the ledger flags it) instead of
    failing the whole block.
    """
    src = J.device
    if device is not None:
        J = J.to(device)
    ok = torch.isfinite(J).flatten(1).all(1)                        # (T,)
    cdtype = torch.complex128 if J.dtype == torch.float64 else torch.complex64
    out = torch.full(J.shape[:2], complex("nan"), dtype=cdtype, device=J.device)  # (T, d)
    if ok.any():
        out[ok] = torch.linalg.eigvals(J[ok])
    return out.to(src)


def scale_direction(J: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """J (T, d, d), h (T, d) the layer's input -> ρ (T,), r (T,) in J's dtype.

    ρ_t = h_tᵀ J h_t / h_tᵀ h_t is the Rayleigh quotient along the scale direction h_t and
    r_t = ‖J h_t − ρ_t h_t‖ / ‖h_t‖ its relative residual. A block whose mixer sees h only
    through one scale-invariant norm has J h = h + O(eps/ms(h)): r ≈ 0 and an eigenvalue
    sits at ρ ≈ 1, a property of the norm rather than of the dynamics. The analysis uses
    (ρ, r) to find that mode by its eigenvector instead of by how close its value is to 1.
    """
    h = h.to(J.dtype)
    Jh = torch.einsum("tij,tj->ti", J, h)                            # (T, d) one batched matvec
    hh = (h * h).sum(-1)                                            # (T,)
    rho = (h * Jh).sum(-1) / hh                                     # (T,)
    resid = torch.linalg.vector_norm(Jh - rho[:, None] * h, dim=-1) / hh.sqrt()   # (T,)
    return rho, resid


def rates(zeta):
    """complex array-like (...) -> 1-D float: λ = -ln|ζ| for the stable modes 0 < |ζ| < 1.

    NaN eigenvalues (unwritten or flagged) fall out because every comparison with NaN is False.
    Returns a torch tensor for a tensor input, else a numpy array.
    """
    if isinstance(zeta, torch.Tensor):
        mod = zeta.abs().flatten()
        return -torch.log(mod[(mod > 0) & (mod < 1)])
    mod = np.abs(np.asarray(zeta)).ravel()
    return -np.log(mod[(mod > 0) & (mod < 1)])
