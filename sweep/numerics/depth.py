"""Stacked blocks: products of token-diagonal Jacobians across consecutive layers (issue 31).

The sequence Jacobian of s consecutive blocks is a product of block-lower-triangular
matrices, so its token-diagonal block is the product of the blocks' J_tt:

    P_t(l, s) = J^(l+s-1)_tt ... J^(l+1)_tt J^(l)_tt  (= dh_{l+s,t} / dh_{l,t})

and the union over t of eig(P_t(l, s)) is the spectrum of the s-block stack. `DepthWalk`
takes the J_tt of one token block layer by layer, up a contiguous run of layers, and gives:

- every product P_t(l, s) for the requested spans as soon as its last factor arrives
  (`step` returns them), holding at most max(spans) - 1 partial products;
- the finite-depth Lyapunov exponents of the run (`lyapunov`): Benettin's algorithm, the
  QR decomposition of J·Q at each layer with the identity as the first frame and the logs
  of |R_ii| summed, so nothing overflows at any depth; gamma_i = (1/S) sum ln|R_ii|, sorted
  largest first. sum_i gamma_i * S = ln|det P_t(l0, S)|.

Pure tensor code: no model, no store. A walking task (sweep/worker/task.py `_run_depth`) feeds it
the J_tt its single blocks form anyway, so each J_tt is formed once.
"""
from __future__ import annotations

import torch


class DepthWalk:
    """Products and Lyapunov exponents of a token block's J_tt (T, d, d) walked up a run."""

    def __init__(self, spans, T: int, d: int, dtype=torch.float64, device=None):
        self.spans = sorted(set(int(s) for s in spans))
        if not self.spans or self.spans[0] < 1:
            raise ValueError(f"spans must be integers >= 1, got {spans!r}")
        self.partial: dict[int, tuple[int, torch.Tensor]] = {}   # start layer -> (span so far, P)
        eye = torch.eye(d, dtype=dtype, device=device)
        self.q = eye.expand(T, d, d).clone()                         # (T, d, d) frame
        self.log_r = torch.zeros(T, d, dtype=dtype, device=device)   # (T, d) sum of ln|R_ii|
        self.steps = 0
        self.dtype = dtype

    def step(self, layer: int, jac: torch.Tensor) -> list[tuple[int, int, torch.Tensor]]:
        """Take J_tt (T, d, d) of `layer` (the run's next layer); returns the completed
        products [(start layer, span, P (T, d, d))]."""
        j = jac.to(self.dtype)
        done = []
        longest = self.spans[-1]
        self.partial[layer] = (0, None)                     # the identity: its first factor is j
        for start in sorted(self.partial):
            span, p = self.partial[start]
            span, p = span + 1, j.clone() if p is None else j @ p
            if span in self.spans:
                done.append((start, span, p))
            if span < longest:
                self.partial[start] = (span, p)
            else:
                del self.partial[start]
        q, r = torch.linalg.qr(j @ self.q)
        self.q = q
        self.log_r += torch.log(torch.diagonal(r, dim1=-2, dim2=-1).abs())
        self.steps += 1
        return done

    def lyapunov(self) -> torch.Tensor:
        """(T, d) gamma_i = (1/S) sum over the S layers walked of ln|R_ii|, largest first."""
        if not self.steps:
            raise ValueError("no layer walked yet")
        return torch.sort(self.log_r / self.steps, dim=-1, descending=True).values


def gain(p: torch.Tensor) -> torch.Tensor:
    """(T,) ||P_t||_F^2 / d: the mean squared gain of a random unit perturbation of token t's
    residual after the stack P (T, d, d)."""
    return torch.linalg.matrix_norm(p).square() / p.shape[-1]
