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

Cotangents of all sampled t go through the backward in batches (`is_grads_batched`), at
most `CHUNK_ELEMENTS` cotangent entries at a time. Pure tensor code: no store, no Dask.
"""
from __future__ import annotations

import torch

CHUNK_ELEMENTS = 1 << 24       # cotangent entries per batched backward (64 MiB in float32)


def lag_profile(call, ts, lags: int, probes: int, seed: int = 0):
    """(m (len(ts), lags+1), stderr (len(ts), lags+1)) float64 of the output tokens `ts` of
    `call` (a WholeSequenceCall over n tokens); NaN where t − k < 0; stderr 0 when exact."""
    from sweep.generic.selfcheck import input_gradients

    _, n, d = call.x.shape
    ts = [int(t) for t in ts]
    per_t = d if probes == 0 else probes
    gen = torch.Generator().manual_seed(seed)
    pairs = [(i, j) for i in range(len(ts)) for j in range(per_t)]       # (token index, cotangent)
    values = torch.full((len(ts), per_t, lags + 1), float("nan"), dtype=torch.float64)
    chunk = max(1, CHUNK_ELEMENTS // (n * d))
    for c0 in range(0, len(pairs), chunk):
        batch = pairs[c0:c0 + chunk]
        w = torch.zeros(len(batch), 1, n, d, dtype=call.x.dtype)
        for b, (i, j) in enumerate(batch):
            if probes == 0:
                w[b, 0, ts[i], j] = 1.0
            else:
                w[b, 0, ts[i]] = torch.randint(0, 2, (d,), generator=gen).to(w.dtype) * 2 - 1
        g = input_gradients(call, w.to(call.x.device))[:, 0]                 # (b, n, d)
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
