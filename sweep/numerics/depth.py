"""Stacked blocks: products of token-diagonal Jacobians across consecutive layers (issue 31).

The sequence Jacobian of s consecutive blocks is a product of block-lower-triangular
matrices, so its token-diagonal block is the product of the blocks' J_tt:

    P_t(l, s) = J^(l+s-1)_tt ... J^(l+1)_tt J^(l)_tt  (= dh_{l+s,t} / dh_{l,t})

and the union over t of eig(P_t(l, s)) is the spectrum of the s-block stack. `DepthWalk`
takes the J_tt of one token block layer by layer, up a contiguous run of layers, and gives:

- every product P_t(l, s) for the requested spans as soon as its last factor arrives
  (`step` returns them), holding at most max(spans) - 1 partial products;
- the finite-depth Lyapunov exponents of the run (`lyapunov`): gamma_i = (1/S) ln sigma_i(P)
  of P = P_t(l0, S), the singular values, largest first. They are invariant under any
  orthogonal change of basis (J -> U J U^T at every layer), gamma_1 >= (1/S) ln rho(P) and
  S sum_i gamma_i = ln|det P|. P itself over- or underflows at depth (48 layers reach e^±200,
  a product of 1000 random matrices e^±2000), so it is never formed: the walk holds
  P = U diag(e^c) V^T as the left singular frame U and the log singular values c, and each
  layer updates them from the SVD of R diag(e^c), R the triangular factor of J U (`_update`);
- Benettin's QR exponents from the identity frame (`lyapunov_qr`), kept as a diagnostic:
  at finite S they depend on the basis, and their top one can lie below (1/S) ln rho(P).

Pure tensor code: no model, no store. A walking task (sweep/worker/depth.py) feeds it
the J_tt its single blocks form anyway, so each J_tt is formed once.
"""
from __future__ import annotations

import numpy as np
import torch

# ln(sigma_1 / sigma_d) that one float64 SVD takes: LAPACK's singular values of a graded matrix
# (`_left_svd`) are accurate to ~1e-14 relative across e^650 (against 600-digit mpmath), but
# entries are squared inside, so below e^-354 they underflow; 300 leaves one layer's own spread
# (ln cond J) room below. Wider frames are split at their widest gap (`_graded_svd`).
RANGE = 300.0

# A gap ln(sigma_k / sigma_k+1) above GAP decouples the frame there: the rows below it move the
# singular values above by a relative e^(-2 GAP) (second order: they are another block's rows),
# below float64's eps, so the gap can be shrunk to GAP before the SVD and restored after it.
GAP = 20.0


class DepthWalk:
    """Products and Lyapunov exponents of a token block's J_tt (T, d, d) walked up a run."""

    def __init__(self, spans, T: int, d: int, dtype=torch.float64, device=None):
        self.spans = sorted(set(int(s) for s in spans))
        if not self.spans or self.spans[0] < 1:
            raise ValueError(f"spans must be integers >= 1, got {spans!r}")
        self.partial: dict[int, tuple[int, torch.Tensor]] = {}   # start layer -> (span so far, P)
        # the exponents in float64 whatever the compute dtype: ln sigma_d of a float32 product
        # is lost below sigma_1·eps32
        eye = torch.eye(d, dtype=torch.float64, device=device).expand(T, d, d)
        self.u = eye.clone()                                         # (T, d, d) left frame
        self.log_s = torch.zeros(T, d, dtype=torch.float64, device=device)   # (T, d) ln sigma_i
        self.q = eye.clone()                                         # (T, d, d) Benettin's frame
        self.log_r = torch.zeros(T, d, dtype=torch.float64, device=device)   # (T, d) sum ln|R_ii|
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
        j64 = jac.to(torch.float64)
        self.u, self.log_s = _update(self.u, self.log_s, j64)
        q, r = torch.linalg.qr(j64 @ self.q)
        self.q = q
        self.log_r += torch.log(torch.diagonal(r, dim1=-2, dim2=-1).abs())
        self.steps += 1
        return done

    def lyapunov(self) -> torch.Tensor:
        """(T, d) float64 gamma_i = (1/S) ln sigma_i(P_t(l0, S)) over the S layers walked,
        largest first."""
        self._need_steps()
        return self.log_s / self.steps

    def lyapunov_qr(self) -> torch.Tensor:
        """(T, d) float64 (1/S) sum of ln|R_ii| of Benettin's QR from the identity frame, largest
        first: a basis-dependent diagnostic, not the finite-depth exponents."""
        self._need_steps()
        return torch.sort(self.log_r / self.steps, dim=-1, descending=True).values

    def _need_steps(self):
        if not self.steps:
            raise ValueError("no layer walked yet")


def _update(u: torch.Tensor, log_s: torch.Tensor, j: torch.Tensor):
    """P = U diag(e^c) V^T -> J P = U' diag(e^c') V'^T: u (T, d, d), log_s (T, d) decreasing,
    j (T, d, d), all float64. V is never needed: the singular values of J P are those of
    J U diag(e^c). With J U = Q R, R diag(e^c) = diag(e^c) N, N_ik = R_ik e^(c_k - c_i) (k >= i,
    so |N_ik| <= |R_ik|: nothing overflows), and N = L Z^T (L lower triangular), the singular
    values and left vectors are those of B = diag(e^c) L. Across a gap wider than GAP the rows
    of B decouple (GAP's comment): the couplings there are dropped and the gap shrunk to GAP,
    so one float64 SVD spans e^2000 and more (exact exponents added back per block); frames
    still wider than RANGE after that go through `_graded_svd`, one token at a time."""
    q, r = torch.linalg.qr(j @ u)                                        # (T, d, d) each
    shrink = torch.exp((log_s[:, None, :] - log_s[:, :, None]).clamp(max=0.0))   # e^(c_k - c_i)
    n = torch.triu(r * shrink)                                           # (T, d, d)
    _, lt = torch.linalg.qr(n.mT)                                        # N^T = Z L^T
    gaps = log_s[:, :-1] - log_s[:, 1:]                                  # (T, d-1) >= 0
    block = torch.nn.functional.pad(torch.cumsum(gaps > GAP, 1), (1, 0))   # (T, d) block id
    low = lt.mT * (block[:, :, None] == block[:, None, :])               # (T, d, d) couplings dropped
    shrunk = -torch.nn.functional.pad(torch.cumsum(gaps.clamp(max=GAP), 1), (1, 0))   # (T, d)
    offset = log_s - shrunk                                              # (T, d) constant per block
    u_b, sv = _left_svd(torch.exp(shrunk)[:, :, None] * low)
    # each left vector lies in one block (to e^-GAP): its weights pick that block's offset
    new_log = torch.log(sv) + torch.einsum("tij,ti->tj", u_b.square(), offset)   # (T, d)
    for t in torch.nonzero(shrunk[:, -1] < -RANGE).flatten().tolist():
        u_b[t], new_log[t] = _graded_svd(n[t], log_s[t])
    order = torch.argsort(new_log, dim=-1, descending=True)
    u_b = torch.gather(u_b, 2, order[:, None, :].expand_as(u_b))
    return q @ u_b, torch.gather(new_log, 1, order)


def _graded_svd(m: torch.Tensor, ls: torch.Tensor):
    """Left singular vectors (k, k) and ln sigma (k,) decreasing of diag(e^ls) m, m (k, k)
    bounded, ls (k,) decreasing over more than RANGE. The rows above the widest gap g span a
    space W; the rows below act on W's complement to within a relative e^(-2g) (their
    coupling to W is that much smaller than W's own singular values), so the two halves are
    taken separately, each one SVD or split again."""
    if float(ls[0] - ls[-1]) <= RANGE:
        u, sv = _left_svd(torch.exp(ls - ls[0])[:, None] * m)
        return u, ls[0] + torch.log(sv)
    k = int(torch.argmax(ls[:-1] - ls[1:])) + 1
    z, _ = torch.linalg.qr(m[:k].T, mode="complete")                    # (n, n): z[:, :k] spans W
    u1, l1 = _graded_svd(m[:k] @ z[:, :k], ls[:k])
    u2, l2 = _graded_svd(m[k:] @ z[:, k:], ls[k:])
    logs = torch.cat([l1, l2])
    order = torch.argsort(logs, descending=True)
    return torch.block_diag(u1, u2)[:, order], logs[order]


def _left_svd(b: torch.Tensor):
    """Left singular vectors (..., k, k) and singular values (..., k) of a row-graded b (..., k, k),
    from LAPACK's gesvd of the column-graded transpose, one matrix at a time: its QR-based
    bidiagonal solver keeps the small singular values and their vectors to full relative
    accuracy there. torch's SVD (gesdd: divide and conquer) does not: an e^-36 sigma came out
    16 % off, an e^-217 one as 0 (against mpmath), and the frame it returns for the small
    sigma carries the large ones' directions, which the next layer multiplies by e^c."""
    from scipy.linalg import svd

    flat = b.mT.reshape(-1, *b.shape[-2:]).cpu().numpy()                # (n, k, k)
    us, svs = [], []
    for m in flat:
        _, sv, vh = svd(m, lapack_driver="gesvd", check_finite=False)
        us.append(vh.T)
        svs.append(sv)
    u = torch.from_numpy(np.stack(us)).to(b.device).reshape(b.shape)
    return u, torch.from_numpy(np.stack(svs)).to(b.device).reshape(b.shape[:-1])


def gain(p: torch.Tensor) -> torch.Tensor:
    """(T,) ||P_t||_F^2 / d: the mean squared gain of a random unit perturbation of token t's
    residual after the stack P (T, d, d)."""
    return torch.linalg.matrix_norm(p).square() / p.shape[-1]


def span_lyapunov(p: torch.Tensor, span: int) -> torch.Tensor:
    """(T, d) float64 (1/span) ln sigma_i(P), largest first, of one formed stack P (T, d, d) of
    `span` blocks (short spans: P is representable, and its SVD in float64 keeps the small
    sigma that a float32 one would lose below sigma_1·eps32)."""
    return torch.log(torch.linalg.svdvals(p.to(torch.float64))) / span
