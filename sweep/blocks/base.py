"""The per-block interface every architecture implements, and the torch.func reference.

One residual block is one step of a dynamical system on the residual stream. For token t
with every earlier position held fixed, the block is a map h_t -> h_{l+1,t} whose Jacobian
J_tt is the token-diagonal block of the (causal, block lower-triangular) sequence Jacobian.
Each architecture writes that map for ONE token (`step`) given the prefix state that the
earlier tokens leave behind (`prefix`); the reference Jacobian lifts it with vmap(jacrev).
"""
from __future__ import annotations

import torch
from torch.func import jacrev, vmap


class BlockOps:
    """Exact dynamics of one residual block, in the model's dtype with no hidden casts.

    Subclasses set `arch`, `d_model`, and implement `forward`, `prefix` and `step`;
    they override `jacobians` when a structured fast path exists.
    """

    arch: str = ""
    d_model: int = 0
    # tokens per vmap chunk in the reference: bounds the (chunk, d, d, ...) temporaries
    ref_chunk: int = 8

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """(L, d) -> (L, d): h_{l+1} for the whole causal sequence."""
        raise NotImplementedError

    def prefix(self, h: torch.Tensor, t0: int, t1: int):
        """(L, d) -> pytree of tensors with leading dim (t1-t0): state left by tokens < t."""
        raise NotImplementedError

    def step(self, h_t: torch.Tensor, prefix_t) -> torch.Tensor:
        """(d,), one token's prefix state -> (d,): h_{l+1,t} with the prefix held fixed."""
        raise NotImplementedError

    def jacobians_ref(self, h: torch.Tensor, t0: int, t1: int) -> torch.Tensor:
        """(L, d) -> (t1-t0, d, d): J_tt by reverse-mode autodiff of the one-token step."""
        pre = self.prefix(h, t0, t1)
        jac = vmap(jacrev(self.step, argnums=0), in_dims=(0, 0), chunk_size=self.ref_chunk)
        return jac(h[t0:t1], pre)

    def jacobians(self, h: torch.Tensor, t0: int, t1: int, out: torch.Tensor | None = None) -> torch.Tensor:
        """(L, d) -> (t1-t0, d, d): the fast path; the reference unless overridden.

        `out`, a (t1-t0, d, d) tensor of h's dtype, receives the result (a worker reuses one
        across tasks: a fresh 32-128 MiB block is mmap'd and page-faulted anew every time).
        """
        J = self.jacobians_ref(h, t0, t1)
        return J if out is None else out.copy_(J)

    def delta(self, h: torch.Tensor, t0: int, t1: int) -> torch.Tensor | None:
        """(L, d) -> (t1-t0, d_inner): selective step Δ_t (Mamba only)."""
        return None

    def a_log(self) -> torch.Tensor | None:
        """(d_inner, d_state): the A_log parameter, A = -exp(A_log) (Mamba only)."""
        return None
