"""A fast CPU training path for Mamba-1: the selective scan with a hand-written backward, and
the MambaMixer's training forward around it.

transformers' reference scan (`modeling_mamba.mamba_selective_scan`, the recurrent path
MambaMixer takes without the CUDA kernels) records autograd nodes per position and layer; the
backward then pays for every node, every strided per-position slice of the (b, d, L, N)
tensors and the final stack. Here the recurrence runs outside autograd and its gradient is
the adjoint recurrence run backwards in time (as the mamba_ssm kernels do):

    forward   h_t = a_t h_{t-1} + u_t,           a_t = exp(dt_t A),   u_t = dt_t x_t B_t
              y_t = <C_t, h_t>
    backward  g_t = dy_t C_t + a_{t+1} g_{t+1}   (g_t = dLoss/dh_t along every path)
              dLoss/du_t = g_t,   dLoss/d(dt_t A) = g_t h_{t-1} a_t

Two backends compute exactly this:

- "fused" (selective_scan.c, compiled on first use): per batch row and block of 32 channels,
  positions in order, channels in the vector lanes; the step size's softplus, the D skip and
  the silu gate are folded in, and the forward keeps every decay for the backward (exp is the
  costliest operation). Everything is read in the (b, L, channel) layout the projections
  produce, so the MambaMixer's transposed views cost no copies.
- "chunked" (torch): inside chunks of T positions all chunks advance together (one op per
  in-chunk position), a short loop across chunks carries each chunk's true end state into the
  next, and a second in-chunk sweep adds it, decayed position by position. Decays enter only
  as products of factors in (0, 1]: they may underflow to 0, which is right (that past is
  forgotten), but never overflow, and nothing is divided by a decay. (An exp(-cumsum(dt A))
  form has a range set by the learned A and dt: no fixed chunk is safe for every checkpoint.)
  The fallback where no C compiler is found, and the float64 path.

`selective_scan_fast` has the reference's signature so it can stand in for it; the reference
stays the oracle (tests/test_train_scan.py compares values and gradients of both backends).
`mixer_forward` is MambaMixer.forward for training: in_proj, the causal conv + silu (C),
x_proj, dt_proj and the gated scan (C), out_proj, all in (b, L, channel) layouts; anything
else (a cache, a padding mask, float64) goes to transformers' own forward. `install()` checks
both against transformers (the mixer against MambaMixer with its reference scan, in float64)
before swapping them in; measured side by side in benchmarks/bench_train_scan.py.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import subprocess
import tempfile
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

CHUNK = 16  # positions per chunk: at L=128, 8 chunks advance together; see chunk_length


def chunk_length(L: int, chunk: int) -> int:
    """The largest divisor of L that is <= chunk (1 for a prime L: a plain sequential scan)."""
    return max(t for t in range(1, min(chunk, L) + 1) if L % t == 0)


def linear_scan_(coef: torch.Tensor, u: torch.Tensor, reverse: bool = False,
                 chunk: int = CHUNK) -> torch.Tensor:
    """First-order linear recurrence along dim 1, written into u in place; returns u.

    forward:  h_t = coef_t h_{t-1} + u_t  (h_{-1} = 0)
    reverse:  h_t = coef_t h_{t+1} + u_t  (h_L = 0)
    coef, u: (b, L, d, N); coef may be a strided view (dims 2, 3 contiguous).
    """
    b, L = u.shape[:2]
    T = chunk_length(L, chunk)
    K = L // T
    uc = u.view(b, K, T, *u.shape[2:])  # (b, K, T, d, N)
    cc = coef.unflatten(1, (K, T))
    # reverse runs the same steps mirrored: position t -> T-1-t, chunk k -> K-1-k
    pos = (lambda t: T - 1 - t) if reverse else (lambda t: t)
    for t in range(1, T):  # every chunk from a zero state, all chunks at once
        uc[:, :, pos(t)].addcmul_(cc[:, :, pos(t)], uc[:, :, pos(t - 1)])
    if K == 1:
        return u
    # state entering each chunk: a short loop over chunks, each carrying its neighbour's end
    total = cc[:, :, 0].clone()  # (b, K, d, N): decay across a whole chunk
    for t in range(1, T):
        total.mul_(cc[:, :, t])
    incoming = torch.zeros_like(total)  # (b, K, d, N)
    for k in range(1, K):
        dst, src = (K - 1 - k, K - k) if reverse else (k, k - 1)
        torch.addcmul(uc[:, src, pos(T - 1)], total[:, src], incoming[:, src], out=incoming[:, dst])
    # add each incoming state, decayed position by position, to every chunk but the first
    rest = slice(0, K - 1) if reverse else slice(1, K)
    carried = incoming[:, rest]
    for t in range(T):
        carried.mul_(cc[:, rest, pos(t)])
        uc[:, rest, pos(t)].add_(carried)
    return u


class _ChunkedSSM(torch.autograd.Function):
    """y = <C, scan(exp(dt A), dt x B)>: the selective state-space map without D and gate.

    x, dt: (b, L, d); A: (d, N); B, C: (b, L, N) -> y (b, L, d), final state (b, d, N).
    All contiguous. chunk: positions per chunk of the scans (see linear_scan_).
    """

    @staticmethod
    def forward(ctx, x, dt, A, B, C, chunk):
        b, L, d = x.shape
        # one spare zero position: the reverse scan's coefficient a_{t+1} is then a view
        a_ext = x.new_empty(b, L + 1, d, A.shape[1])  # (b, L+1, d, N)
        a = a_ext[:, :L]
        torch.mul(dt.unsqueeze(-1), A, out=a).exp_()
        a_ext[:, L].zero_()
        h = (dt * x).unsqueeze(-1) * B.unsqueeze(2)  # u_t = dt x B, then h in place
        linear_scan_(a, h, chunk=chunk)
        ctx.chunk = chunk
        ctx.save_for_backward(x, dt, A, B, C, a_ext, h)
        last = h[:, -1].clone()  # (b, d, N): what a cache would keep; no gradient flows back
        ctx.mark_non_differentiable(last)
        return (h @ C.unsqueeze(-1)).squeeze(-1), last  # (b, L, d), (b, d, N)

    @staticmethod
    def backward(ctx, gy, _):  # gy (b, L, d)
        x, dt, A, B, C, a_ext, h = ctx.saved_tensors
        L = x.shape[1]
        a = a_ext[:, :L]
        # sums over d as multiply-then-reduce: einsum would permute (copy) the big operand
        gC = (h * gy.unsqueeze(-1)).sum(2)  # (b, L, N)
        g = gy.unsqueeze(-1) * C.unsqueeze(2)  # dy_t C_t: (b, L, d, N)
        linear_scan_(a_ext[:, 1:], g, reverse=True, chunk=ctx.chunk)  # g_t += a_{t+1} g_{t+1}
        gu_B = (g @ B.unsqueeze(-1)).squeeze(-1)  # sum_N g B: (b, L, d)
        gB = (g * (dt * x).unsqueeze(-1)).sum(2)  # (b, L, N)
        g.mul_(a)  # dLoss/d(dt A) = g_t h_{t-1} a_t, h_{-1} = 0
        g[:, 1:].mul_(h[:, :-1])
        g[:, 0].zero_()
        gdt = gu_B * x + (g * A).sum(-1)
        gA = g.mul_(dt.unsqueeze(-1)).sum((0, 1))  # (d, N)
        return gu_B * dt, gdt, gA, gB, gC, None


# ---------------------------------------------------------------- fused C kernel

KERNEL_SOURCE = Path(__file__).with_name("selective_scan.c")
# -ffast-math at compile time only, for the vectorised expf of glibc's libmvec; linking without
# it keeps crtfastmath (which would flush denormals process-wide) out of the library.
# -mprefer-vector-width=256: some x86 tunings (znver1, this machine's) default to 128-bit lanes.
COMPILE_FLAGS = ["-O3", "-march=native", "-ffast-math", "-fopenmp-simd", "-fPIC",
                 *(["-mprefer-vector-width=256"] if platform.machine() in ("x86_64", "AMD64") else [])]
LINK_FLAGS = ["-shared", "-lmvec", "-lm"]


@functools.lru_cache(maxsize=1)
def load_kernel() -> ctypes.CDLL | None:
    """selective_scan.c compiled for this machine, or None (with a warning) if it cannot be.

    Cached in the temp dir under a key naming everything that decides the binary: the
    source, the compiler and its flags, and the host (-march=native).
    """
    cc = os.environ.get("CC", "cc")
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout
        key = hashlib.sha256("\0".join([KERNEL_SOURCE.read_text(), cc, version, *COMPILE_FLAGS,
                                        *LINK_FLAGS, platform.node(), platform.machine()])
                             .encode()).hexdigest()[:16]
        lib = Path(tempfile.gettempdir()) / f"tdos-selective-scan-{key}.so"
        if not lib.exists():
            with tempfile.TemporaryDirectory() as tmp:
                obj, so = Path(tmp) / "scan.o", Path(tmp) / "scan.so"
                subprocess.run([cc, *COMPILE_FLAGS, "-c", str(KERNEL_SOURCE), "-o", str(obj)],
                               check=True, capture_output=True)
                subprocess.run([cc, str(obj), "-o", str(so), *LINK_FLAGS], check=True,
                               capture_output=True)
                os.replace(so, lib)  # atomic: concurrent builders never load a partial file
        kernel = ctypes.CDLL(str(lib))
    except (OSError, subprocess.CalledProcessError) as err:
        warnings.warn(f"fused selective scan unavailable ({err}); using the chunked torch scan")
        return None
    i, n, p = ctypes.c_int, ctypes.c_long, ctypes.c_void_p
    scan = [i, i, i, i, p, p, p, n, p, p, n, p, n, p, p, i]  # sizes, x, dtr, z, A, B, C, D, bias
    kernel.ssm_forward.argtypes = scan + [p] * 3
    kernel.ssm_backward.argtypes = scan + [p] * 10
    kernel.ssm_block.restype = i
    conv = [i, i, i, i, p, n, p, p]  # sizes, x, w, bias
    kernel.conv_silu_forward.argtypes = conv + [p]
    kernel.conv_silu_backward.argtypes = conv + [p] * 4
    return kernel


def _ptr(t: torch.Tensor | None) -> ctypes.c_void_p | None:
    """A raw pointer (None for None): it does not keep the tensor alive, the caller's names must."""
    if t is None:
        return None
    assert t.dtype == torch.float32 and (t.stride(-1) == 1 or t.shape[-1] == 1), (t.dtype, t.stride())
    return ctypes.c_void_p(t.data_ptr())


def _rows(t: torch.Tensor | None) -> tuple[torch.Tensor | None, int]:
    """t (b, L, k) as the kernels read it, with its row stride ld: unit stride along k, rows
    ld apart, batches L*ld apart (a slice of a wider (b, L, *) projection qualifies as it is);
    copied otherwise. Strides of size-1 dims are free in torch, so they are not checked."""
    if t is None:
        return None, 0
    b, L, k = t.shape
    ld = t.stride(1) if L > 1 else t.stride(0)
    if (k == 1 or t.stride(-1) == 1) and (b == 1 or t.stride(0) == L * ld):
        return t, ld
    return t.contiguous(), k


class _FusedSSM(torch.autograd.Function):
    """out = (<C, scan(exp(dt A), dt x B)> + D x) silu(z), dt = softplus(dtr + bias), through
    the C kernel, all in (b, L, channel) layouts.

    x, dtr: (b, L, d); z: (b, L, d) or None (no gate); A: (d, N); B, C: (b, L, N) (slices of a
    wider projection are read in place); D, bias: (d,) or None (zero); float32.
    -> out (b, L, d), final state (b, d, N).
    """

    @staticmethod
    def forward(ctx, x, dtr, z, A, B, C, D, bias, softplus):
        b, L, d = x.shape
        N = A.shape[1]
        x, dtr = x.contiguous(), dtr.contiguous()  # their rows are read d apart
        (z, ldz), (B, ldb), (C, ldc) = _rows(z), _rows(B), _rows(C)
        A_nd = A.t().contiguous()  # (N, d): channels innermost, as the kernel's loops run
        D_ = x.new_zeros(d) if D is None else D.contiguous()
        bias_ = x.new_zeros(d) if bias is None else bias.contiguous()
        out, last = x.new_empty(b, L, d), x.new_empty(b, N, d)
        # every decay exp(dt A), kept for the backward (b*L*N*d floats; its layout: decay_at)
        jb = load_kernel().ssm_block()  # the kernel's channel block
        E = x.new_empty(b * -(-d // jb) * jb * L * N) if any(ctx.needs_input_grad) else None
        load_kernel().ssm_forward(b, L, d, N, _ptr(x), _ptr(dtr), _ptr(z), ldz, _ptr(A_nd),
                                  _ptr(B), ldb, _ptr(C), ldc, _ptr(D_), _ptr(bias_),
                                  int(softplus), _ptr(out), _ptr(last), _ptr(E))
        ctx.save_for_backward(x, dtr, z, A_nd, B, C, D_, bias_, E)
        ctx.meta = (ldz, ldb, ldc, int(softplus), D is None, bias is None)
        last = last.transpose(1, 2)
        ctx.mark_non_differentiable(last)
        return out, last

    @staticmethod
    def backward(ctx, gout, _):
        x, dtr, z, A_nd, B, C, D, bias, E = ctx.saved_tensors
        ldz, ldb, ldc, softplus, no_D, no_bias = ctx.meta
        b, L, d = x.shape
        N = A_nd.shape[0]
        gout = gout.contiguous()  # bound to a name: a temporary could be freed before the call
        gx, gdtr, gz = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
        gA, gD, gbias = torch.zeros_like(A_nd), torch.zeros_like(D), torch.zeros_like(bias)
        gB, gC = x.new_zeros(b, L, N), x.new_zeros(b, L, N)
        load_kernel().ssm_backward(b, L, d, N, _ptr(x), _ptr(dtr), _ptr(z), ldz, _ptr(A_nd),
                                   _ptr(B), ldb, _ptr(C), ldc, _ptr(D), _ptr(bias), softplus,
                                   _ptr(gout), _ptr(gx), _ptr(gdtr), _ptr(gz), _ptr(gA),
                                   _ptr(gB), _ptr(gC), _ptr(gD), _ptr(gbias), _ptr(E))
        return (gx, gdtr, None if z is None else gz, gA.t(), gB, gC, None if no_D else gD,
                None if no_bias else gbias, None)


class _ConvSiLU(torch.autograd.Function):
    """silu(causal depthwise conv1d(x)): the MambaMixer's conv (padding K-1, first L kept).

    x: (b, L, d) (a slice of the in_proj output is read in place); weight: (d, 1, K);
    bias: (d,) or None -> (b, L, d).
    """

    @staticmethod
    def forward(ctx, x, weight, bias):
        b, L, d = x.shape
        K = weight.shape[-1]
        x, ldx = _rows(x)
        w = weight.reshape(d, K).t().contiguous()  # (K, d)
        bias_ = x.new_zeros(d) if bias is None else bias.contiguous()
        out = x.new_empty(b, L, d)
        load_kernel().conv_silu_forward(b, L, d, K, _ptr(x), ldx, _ptr(w), _ptr(bias_), _ptr(out))
        ctx.save_for_backward(x, w, bias_)
        ctx.meta = (ldx, bias is None, weight.shape)
        return out

    @staticmethod
    def backward(ctx, gout):
        x, w, bias = ctx.saved_tensors
        ldx, no_bias, wshape = ctx.meta
        b, L, d = gout.shape
        gout = gout.contiguous()
        gx, gw, gbias = x.new_empty(b, L, d), torch.zeros_like(w), torch.zeros_like(bias)
        load_kernel().conv_silu_backward(b, L, d, w.shape[0], _ptr(x), ldx, _ptr(w), _ptr(bias),
                                         _ptr(gout), _ptr(gx), _ptr(gw), _ptr(gbias))
        return gx, gw.t().reshape(wshape), None if no_bias else gbias


# ---------------------------------------------------------------- the drop-in

def selective_scan_fast(hidden_states, dt, A, B, C, D=None, z=None, delta_bias=None,
                        delta_softplus=False, return_last_state=False, backend=None,
                        chunk=CHUNK, **kwargs):
    """Drop-in for transformers' `mamba_selective_scan` (no initial state, as the reference).

    hidden_states, dt, z: (b, d, L); A: (d, N); B, C: (b, N, L); D, delta_bias: (d,)
    -> (b, d, L) [, final state (b, d, N)]. backend: "fused" (the C kernel, float32 only),
    "chunked" (torch; chunk positions per chunk) or None: fused when it compiles and the
    inputs are float32. Other keywords (use_mambapy, ...) pick among the reference's own
    paths and mean nothing here.
    """
    if backend is None:
        backend = "fused" if hidden_states.dtype == torch.float32 and load_kernel() else "chunked"
    if backend == "fused":
        if load_kernel() is None or hidden_states.dtype != torch.float32:
            raise RuntimeError("backend fused: needs float32 inputs and a C compiler (see load_kernel)")
        rows = lambda t: None if t is None else t.transpose(1, 2)  # noqa: E731  (b, L, .) views
        out, last = _FusedSSM.apply(rows(hidden_states), rows(dt), rows(z), A, rows(B), rows(C),
                                    D, delta_bias, delta_softplus)
        y = out.transpose(1, 2)
        return (y, last) if return_last_state else y
    if delta_bias is not None:
        dt = dt + delta_bias[..., None]
    if delta_softplus:
        dt = F.softplus(dt)
    if backend == "chunked":
        x, dt_, B_, C_ = (t.transpose(1, 2).contiguous() for t in (hidden_states, dt, B, C))
        y, last = _ChunkedSSM.apply(x, dt_, A.contiguous(), B_, C_, chunk)
        y = y.transpose(1, 2)  # (b, d, L)
    else:
        raise ValueError(f"backend: expected fused, chunked or None, got {backend!r}")
    if D is not None:
        y = y + hidden_states * D[None, :, None]
    if z is not None:
        y = y * F.silu(z)
    return (y, last) if return_last_state else y


def mixer_forward(self, hidden_states, cache=None, attention_mask=None, **kwargs):
    """MambaMixer.forward for training: the same map, the same parameters, in (b, L, channel)
    layouts end to end, with the conv + silu and the gated scan in the C kernels.

    Anything it does not cover (a cache, a padding mask, float64, another activation, no C
    compiler) goes to transformers' own forward, unchanged.
    """
    if (cache is not None or attention_mask is not None or self.activation != "silu"
            or hidden_states.dtype != torch.float32 or load_kernel() is None):
        return _hf_mixer_forward()(self, hidden_states, cache=cache, attention_mask=attention_mask,
                                   **kwargs)
    d, N = self.intermediate_size, self.ssm_state_size
    xz = self.in_proj(hidden_states)  # (b, L, 2d): x then the gate z, read in place
    x = _ConvSiLU.apply(xz[..., :d], self.conv1d.weight, self.conv1d.bias)
    dt_r, B, C = torch.split(self.x_proj(x), [self.time_step_rank, N, N], dim=-1)
    dtr = F.linear(dt_r, self.dt_proj.weight)  # its bias goes in before the softplus
    bias = None if self.dt_proj.bias is None else self.dt_proj.bias.float()
    y, _ = _FusedSSM.apply(x, dtr, xz[..., d:], -torch.exp(self.A_log.float()), B, C,
                           self.D.float(), bias, True)
    return self.out_proj(y)


def _hf_mixer_forward():
    """transformers' MambaMixer.forward, even after install() replaced it."""
    from transformers.models.mamba import modeling_mamba

    mixer = modeling_mamba.MambaMixer
    return getattr(mixer, "_hf_forward", mixer.forward)


def check_mixer(mixer_fn=None, seed=0) -> float:
    """mixer_forward against transformers' MambaMixer.forward with its reference scan, run in
    float64 on the same weights: output and every parameter and input gradient. Returns the
    largest error relative to the reference's largest entry; raises above 1e-4."""
    from transformers import MambaConfig
    from transformers.models.mamba import modeling_mamba

    mixer_fn = mixer_fn or mixer_forward
    torch.manual_seed(seed)
    config = MambaConfig(hidden_size=16, state_size=4, expand=2, conv_kernel=4,
                         time_step_rank=3, num_hidden_layers=1)
    ours = modeling_mamba.MambaMixer(config, layer_idx=0).train()
    with torch.no_grad():  # a non-trivial conv bias and D, spread-out A
        for p in ours.parameters():
            p.add_(0.1 * torch.randn_like(p))
    ref = modeling_mamba.MambaMixer(config, layer_idx=0).train().double()
    ref.load_state_dict({k: v.double() for k, v in ours.state_dict().items()})
    gen = torch.Generator().manual_seed(seed + 1)
    h = torch.randn(2, 37, 16, generator=gen)
    weight = torch.randn(2, 37, 16, generator=gen)
    saved = modeling_mamba.mamba_selective_scan
    modeling_mamba.mamba_selective_scan = getattr(modeling_mamba, "_reference_selective_scan", saved)
    try:
        results = []
        for mixer, fn, x in ((ours, mixer_fn, h), (ref, _hf_mixer_forward(), h.double())):
            x = x.clone().requires_grad_()
            out = fn(mixer, x)
            grads = torch.autograd.grad((out * weight.to(out.dtype)).sum(), [x, *mixer.parameters()])
            results.append([out, *grads])
    finally:
        modeling_mamba.mamba_selective_scan = saved
    names = ["output", "input", *(n for n, _ in ours.named_parameters())]
    worst = 0.0
    for name, a, r in zip(names, *results):
        a, r = a.detach(), r.detach()
        err = float((a.double() - r).abs().max() / r.abs().max().clamp_min(1e-30))
        if not err < 1e-4:
            raise AssertionError(f"mixer_forward vs transformers, {name}: relative error {err:.1e}")
        worst = max(worst, err)
    return worst


def install() -> None:
    """Swap in the fast training scan and mixer after checking each against what it replaces.

    The saved weights are plain transformers weights; the checks guarantee the
    functions they were trained under compute what every loader will run.
    """
    from transformers.models.mamba import modeling_mamba

    # always transformers' own scan, even after an earlier install() replaced it
    reference = getattr(modeling_mamba, "_reference_selective_scan", modeling_mamba.mamba_selective_scan)
    modeling_mamba._reference_selective_scan = reference

    gen = torch.Generator().manual_seed(0)
    b, d, L, N = 2, 8, 48, 4  # L = 3 chunks of 16: the carry across chunks is exercised
    leaves = [torch.randn(b, d, L, generator=gen), torch.randn(b, d, L, generator=gen),
              -torch.rand(d, N, generator=gen), torch.randn(b, N, L, generator=gen),
              torch.randn(b, N, L, generator=gen), torch.randn(d, generator=gen),
              torch.randn(b, d, L, generator=gen), torch.randn(d, generator=gen)]
    # transposed, as the gradient reaching the scan inside MambaMixer is: not contiguous
    weight = torch.randn(b, L, d, generator=gen).transpose(1, 2)

    def value_and_grads(scan):
        ts = [t.clone().requires_grad_() for t in leaves]
        y = scan(*ts[:5], D=ts[5], z=ts[6], delta_bias=ts[7], delta_softplus=True)
        return [y, *torch.autograd.grad((y * weight).sum(), ts)]

    for new, ref in zip(value_and_grads(selective_scan_fast),
                        value_and_grads(reference)):
        torch.testing.assert_close(new, ref, rtol=1e-4, atol=1e-4)
    modeling_mamba.mamba_selective_scan = selective_scan_fast
    mixer = modeling_mamba.MambaMixer
    mixer._hf_forward = _hf_mixer_forward()
    if load_kernel() is not None:
        check_mixer()
        mixer.forward = mixer_forward
