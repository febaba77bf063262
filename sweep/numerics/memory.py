"""Token memory: the off-diagonal blocks J_{t,s} = ∂h_{l+1,t}/∂h_{l,s} of one layer, by lag.

m_t(k) = ‖J_{t,t−k}‖_F² says how strongly token t's output depends on the input k tokens
back, every other input held. One reverse pass of the layer's whole-sequence call (the
unmodified transformers layer, its cache entries — K/V, conv and SSM states — as functions
of its inputs: sweep/generic/selfcheck.py `WholeSequenceCall`) from a cotangent u on output t
gives uᵀJ_{t,s} for every s ≤ t at once. So:

- exact (`probes` = 0): the d unit cotangents at output t; m_t(k) = Σ_i ‖e_iᵀJ_{t,t−k}‖²;
- Hutchinson (`probes` = p): p Rademacher cotangents u ∈ {±1}^d, unbiased since
  E‖J_{t,s}ᵀu‖² = tr(J_{t,s} J_{t,s}ᵀ) = ‖J_{t,s}‖_F²; the standard error is the sample
  standard deviation of the p values over √p.

The layer's forward runs once and every cotangent goes back through its kept graph. On the
CPU one cotangent per backward is fastest (batching them with `is_grads_batched` was, per
cotangent, 1.4× slower for the demo's GPT-NeoX layer and 2.7–12× for its Mamba layer); on an
accelerator they go back in batches. A batched backward holds about one copy of the
forward's saved activations per cotangent, so a batch has at most `BACKWARD_BYTES` / (bytes
the forward saved, the weights left out) cotangents, and at most `CHUNK_ELEMENTS` cotangent
entries.

Mamba-1's scan: transformers' reference recurrence (used wherever mamba_ssm's kernels are
not, e.g. on the CPU) indexes its (d_inner, L, N) decay and drive tensors one token at a
time, and autograd turns each index into a full-size gradient, so one backward costs
O(L²·d_inner·N): 38 s per cotangent at Mamba-370M's shapes and L = 512. transformers' own
alternative, mamba.py's parallel scan (the `use_mambapy` option of Mamba's config, read from
the mixer's attribute of that name at each call), computes the same states (3e-7 relative
in float32) with an O(L) backward: 0.76 s there. The memory call's forward switches it on
for the layer while the graph is built (`_mambapy`), when mambapy is installed (a
dependency of tdos); nothing else the sweep computes goes through it. Its scan, like
mamba_ssm's kernels, is an autograd.Function without a batching rule, so a layer with a
Mamba-1 mixer takes one cotangent per backward on every device.

Pure tensor code: no store, no Dask.
"""
from __future__ import annotations

import contextlib
import importlib.util

import torch

CHUNK_ELEMENTS = 1 << 24       # cotangent entries per batched backward (64 MiB in float32)
BACKWARD_BYTES = 1 << 30       # activations one batched backward may hold (sweep/budget/memory.py)


def _mamba1_mixers(layer: torch.nn.Module) -> list:
    return [m for m in layer.modules() if isinstance(getattr(m, "use_mambapy", None), bool)]


@contextlib.contextmanager
def _mambapy(layer: torch.nn.Module):
    """Mamba-1 mixers of `layer` on mamba.py's parallel scan (module docstring), restored after."""
    mixers = _mamba1_mixers(layer)
    before = [m.use_mambapy for m in mixers]
    try:
        if importlib.util.find_spec("mambapy") is not None:
            for m in mixers:
                m.use_mambapy = True
        yield
    finally:
        for m, b in zip(mixers, before):
            m.use_mambapy = b


def _graph(call):
    """(x, y, bytes) of one forward of `call` with its graph kept: x its input leaf, y its
    output, bytes the activations autograd saved for the backward (the weights left out)."""
    weights = {p.untyped_storage().data_ptr() for p in call.layer.parameters()}
    saved = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in weights:
            saved[ptr] = t.untyped_storage().nbytes()
        return t
    x = call.x.clone().requires_grad_(True)
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
            _mambapy(call.layer):
        y = call(x)
    return x, y, sum(saved.values())


def rows_per_backward(call, x: torch.Tensor, saved: int) -> int:
    """Cotangents per backward (module docstring): 1 on the CPU or through a Mamba-1 scan, else
    as many as the bounds allow."""
    if x.device.type == "cpu" or _mamba1_mixers(call.layer):
        return 1
    _, n, d = x.shape
    return max(1, min(CHUNK_ELEMENTS // (n * d), BACKWARD_BYTES // max(saved, 1)))


def lag_profile(call, ts, lags: int, probes: int, seed: int = 0, rows: int | None = None):
    """(m (len(ts), lags+1), stderr (len(ts), lags+1)) float64 of the output tokens `ts` of
    `call` (a WholeSequenceCall over n tokens); NaN where t − k < 0; stderr 0 when exact.
    `rows`: cotangents per backward (default `rows_per_backward`)."""
    _, n, d = call.x.shape
    x, y, saved = _graph(call)
    ts = [int(t) for t in ts]
    per_t = d if probes == 0 else probes
    gen = torch.Generator().manual_seed(seed)
    pairs = [(i, j) for i in range(len(ts)) for j in range(per_t)]       # (token index, cotangent)
    values = torch.full((len(ts), per_t, lags + 1), float("nan"), dtype=torch.float64)
    chunk = rows or rows_per_backward(call, x, saved)
    for c0 in range(0, len(pairs), chunk):
        batch = pairs[c0:c0 + chunk]
        w = torch.zeros(len(batch), 1, n, d, dtype=call.x.dtype)
        for b, (i, j) in enumerate(batch):
            if probes == 0:
                w[b, 0, ts[i], j] = 1.0
            else:
                w[b, 0, ts[i]] = torch.randint(0, 2, (d,), generator=gen).to(w.dtype) * 2 - 1
        with torch.enable_grad():
            g, = torch.autograd.grad(y, x, w.to(x.device)[0] if len(batch) == 1 else w.to(x.device),
                                     retain_graph=True, is_grads_batched=len(batch) > 1)
        g = g.reshape(len(batch), n, d)                                      # (b, n, d)
        sq = g.double().square().sum(-1).cpu()                               # (b, n) ‖uᵀJ_{t,s}‖²
        for b, (i, j) in enumerate(batch):
            t = ts[i]
            k = min(lags, t)
            values[i, j, : k + 1] = sq[b, t - k: t + 1].flip(0)             # s = t, t−1, …, t−k
    if probes == 0:
        return values.sum(1), torch.where(values[:, 0].isnan(), values[:, 0], 0.0)
    mean = values.mean(1)
    stderr = values.std(1, correction=1) / probes ** 0.5 if probes > 1 else torch.full_like(mean, float("nan"))
    return mean, stderr
