"""J_tt of one decoder layer by the model's own incremental decoding.

`LayerJacobians(model, layer).run(ids, t0, t1)` decodes the sequence the way `generate()`
does (transformers' `prepare_inputs_for_generation`, a `DynamicCache` made as generate makes
it, explicit position ids): one parallel prefill of tokens [0, t0), then one token at a
time. Every forward stops right after layer `layer` (nothing above it is needed). At each
token t in [t0, t1), a pre-hook on the layer differentiates a copy of the layer's call with
respect to its hidden-state input while `prefix.held_fixed` holds the cache (the prefix)
fixed; the real call then runs and advances the cache. The copy's output must equal the
real one (to rounding), which every token checks.

J_tt rows come from one reverse-mode pass per chunk of cotangents (`torch.vmap` over
`torch.autograd.grad`): d/`JAC_CHUNK` batched backward passes through transformers' own
layer code.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer, LinearAttentionCacheLayerMixin

from sweep.generic import attention, prefix, ssm
from sweep.checkpoints import hf
from sweep.numerics.dtypes import row_of
from sweep.plan.layers import decoder_layers, layer_kinds

JAC_CHUNK = 512          # cotangents per batched backward (bench: 512 ~8 % faster than 128 at d = 1024)


@dataclass
class LayerBlock:
    """What one block of tokens [t0, t1) of one layer gave."""

    jac: torch.Tensor             # (T, d, d) J_tt
    inputs: torch.Tensor          # (T, d) h_{l,t}, the layer's input
    outputs: torch.Tensor         # (T, d) h_{l+1,t}
    delta: torch.Tensor | None    # (T, channels) Δ_t of a layer with a decay (Mamba-style,
                                  # gated delta rule: sweep/generic/ssm.py), else None
    attention: str                # "split" (prefix held by tdos' attention), "concat", or "none"
    mismatch: float               # largest relative difference of the copy's output to the real


class DeltaUnseen(RuntimeError):
    """A decaying layer's decode step made no call tdos recognises as its state update."""


class _Stop(Exception):
    """Raised after the layer: nothing above it is computed."""

    def __init__(self, kwargs):
        self.kwargs = kwargs


class LayerJacobians:
    """J_tt of decoder layer `layer` of a transformers causal LM (eval mode, no grad params)."""

    def __init__(self, model: torch.nn.Module, layer: int, chunk: int = JAC_CHUNK,
                 fresh: list | None = None, structured: bool = True, on_forward=None):
        self.model, self.index, self.chunk = model, layer, chunk
        # called with (start, n) before every forward of tokens [start, start + n): a
        # layer-local model (sweep/generic/local.py) feeds the stored residual there
        self.on_forward = on_forward
        # False: every op under plain autograd through transformers' code (the reference
        # route; sweep/generic/ssm.py's structured derivatives off)
        self.structured = structured
        # every run starts from the model's fresh module-held state (prefix.module_state):
        # a model that keeps decode state on its modules (RecurrentGemma) would otherwise
        # start a sequence from the end of the previous one when a cache is passed in
        self.fresh = prefix.module_state(model) if fresh is None else fresh
        self.layer = decoder_layers(model)[layer]
        self.kind = layer_kinds(model)[layer]
        self.steps = ssm.Steps(self.layer, self.kind) if self.kind.ssm else None
        self.split: bool | None = None        # attention through the interface: probed once
        params = inspect.signature(model.forward).parameters
        self._positions = "position_ids" in params
        self._carried = set(params)

    def run(self, ids: torch.Tensor, t0: int, t1: int, out: torch.Tensor | None = None) -> LayerBlock:
        """ids (n,) int64 with n >= t1 -> LayerBlock of tokens [t0, t1); `out` (T, d, d)
        receives J_tt when given."""
        T, d = t1 - t0, self.layer_dim()
        dtype = next(self.model.parameters()).dtype
        jac = out if out is not None else torch.empty(T, d, d, dtype=dtype)
        rec = _Recorder(self, jac)
        kw = self._generation_kwargs()
        prefix.restore_state(self.fresh)
        with torch.no_grad(), ssm.patched(self.layer, rec.delta_calls, self.structured), rec.hooks():
            if t0 > 0:
                rec.differentiate = False
                self._forward(ids, 0, t0, kw)
            elif isinstance(kw.get("cache"), Cache):
                self._prime(kw["cache"], ids, rec)
            rec.differentiate = True
            for t in range(t0, t1):
                self._forward(ids, t, 1, kw)
        delta = None
        if self.kind.ssm:
            delta = torch.stack(rec.deltas)
        return LayerBlock(jac, torch.stack(rec.inputs), torch.stack(rec.outputs), delta,
                          rec.mode, rec.mismatch)

    def layer_dim(self) -> int:
        return self.model.config.get_text_config().hidden_size

    def _generation_kwargs(self) -> dict:
        """What generate() passes to the first forward: a fresh cache where the model takes one."""
        kw = {"use_cache": True}
        if hf.default_dynamic_cache(self.model):
            kw["cache"] = DynamicCache(config=self.model.config.get_text_config(decoder=True))
        return kw

    def _prime(self, cache: Cache, ids, rec) -> None:
        """Put the conv/recurrent states of the empty prefix (zeros) into `cache`, so token 0
        takes the model's one-token decode step like every later token.

        Without a previous state the Mamba-style mixers run their whole-sequence form on
        token 0: for Mamba-2 a chunked scan padded to chunk_size (256) tokens, whose batched
        backward costs minutes a token. From a zero state the decode step is the same map
        (the causal convolution pads with zeros, the scan starts from zero). The states get
        their shapes from one throwaway token through layers 0..layer, its values discarded
        (so the Mamba-2-style mixers take it in chunks of one token, not padded to 256);
        attention layers of the cache are emptied again."""
        if not any(isinstance(l, LinearAttentionCacheLayerMixin) for l in cache.layers):
            return
        rec.differentiate = False
        chunked = [m for m in self.model.modules() if isinstance(getattr(m, "A_log", None), torch.nn.Parameter)
                   and isinstance(getattr(m, "chunk_size", None), int)]
        sizes = [m.chunk_size for m in chunked]
        try:
            for m in chunked:
                m.chunk_size = 1
            self._forward(ids, 0, 1, {"use_cache": True, "cache": cache})
        finally:
            for m, size in zip(chunked, sizes):
                m.chunk_size = size
        for layer in cache.layers:
            if isinstance(layer, DynamicLayer):
                DynamicLayer.reset(layer)              # its keys and values (a hybrid's too)
            if isinstance(layer, LinearAttentionCacheLayerMixin):
                for i in range(layer.number_of_states):
                    for states in (layer.conv_states, layer.recurrent_states):
                        if states[i] is not None:
                            states[i].zero_()
                    layer.has_previous_state[i] = (layer.is_conv_states_initialized[i]
                                                   or layer.is_recurrent_states_initialized[i])
        prefix.restore_state(self.fresh)
        rec.delta_calls.clear()

    def _forward(self, ids, start, n, kw) -> None:
        """Tokens [start, start + n) through layers 0..layer, the previous ones cached."""
        if self.on_forward is not None:
            self.on_forward(start, n)
        step = dict(kw, attention_mask=torch.ones(1, start + n, dtype=torch.long))
        if self._positions:
            step["position_ids"] = torch.arange(start + n).unsqueeze(0)
        inputs = self.model.prepare_inputs_for_generation(
            ids[None, : start + n], next_sequence_length=n, is_first_iteration=start == 0, **step)
        try:
            self.model(**inputs)
        except _Stop as stop:
            # state objects the model made inside the forward (RWKV's state list) are
            # carried to the next step as generate would carry them from the outputs
            for k, v in stop.kwargs.items():
                if k in self._carried and (isinstance(v, Cache) or tensor_list(v)):
                    kw[k] = v
            return
        raise RuntimeError(f"layer {self.index} was not called by {type(self.model).__name__}")


def tensor_list(v) -> bool:
    return isinstance(v, (list, tuple)) and bool(v) and all(isinstance(t, torch.Tensor) for t in v)


def split_hidden(args, kwargs):
    """The layer's hidden-state input and the rest of its arguments."""
    if args:
        return args[0], args[1:], kwargs
    kwargs = dict(kwargs)
    return kwargs.pop("hidden_states"), (), kwargs


def first_output(out):
    return out[0] if isinstance(out, (tuple, list)) else out


class _Recorder:
    """The layer's hooks for one `run`: inputs, outputs, Δ, J_tt rows and the checks."""

    def __init__(self, owner: LayerJacobians, jac: torch.Tensor):
        self.owner, self.jac = owner, jac
        self.inputs, self.outputs, self.deltas, self.delta_calls = [], [], [], []
        self.differentiate, self.busy = False, False
        self.mode, self.mismatch, self._copy = "none", 0.0, None

    def hooks(self):
        import contextlib

        layer = self.owner.layer

        @contextlib.contextmanager
        def installed():
            pre = layer.register_forward_pre_hook(self._pre, with_kwargs=True)
            post = layer.register_forward_hook(self._post, with_kwargs=True)
            try:
                yield
            finally:
                pre.remove()
                post.remove()
        return installed()

    def _pre(self, module, args, kwargs):
        if self.busy or not self.differentiate:
            return None
        x, rest, kw = split_hidden(args, kwargs)
        self.inputs.append(x[0, -1].detach().clone())
        self.busy = True
        try:
            self._copy = self._differentiate(x, rest, kw)
        finally:
            self.busy = False
        self.delta_calls.clear()                  # only the real call's Δ is recorded
        return None

    def _post(self, module, args, kwargs, output):
        if self.busy:
            return None
        if self.differentiate:
            real = first_output(output)[0, -1].detach()
            self.outputs.append(real.clone())
            scale = real.abs().max().clamp_min(torch.finfo(real.dtype).tiny)
            self.mismatch = max(self.mismatch, float((self._copy - real).abs().max() / scale))
            limit = row_of(real.dtype).held_prefix   # accepted as "the same call"
            if self.mismatch > limit:
                raise RuntimeError(f"layer {self.owner.index}: the held-prefix copy of the call "
                                   f"differs from the model's own output by {self.mismatch:.1e} "
                                   f"(> {limit:g}): this layer's cache was not held fixed")
            if self.owner.steps is not None:
                if not self.delta_calls or self.delta_calls[-1] is None:
                    op = ("fla's gated delta rule" if self.owner.kind.ssm == "deltanet"
                          else "mamba_ssm's selective_state_update")
                    raise DeltaUnseen(f"no call of the decode step was recognised as {op}, so "
                                      f"Δ_t cannot be read")
                self.deltas.append(self.owner.steps(self.delta_calls[-1][0].detach().clone()))
        raise _Stop(kwargs)

    def _differentiate(self, x, rest, kw) -> torch.Tensor:
        """Fill J_tt's row block for this token; returns the copy's output (d,)."""
        owner = self.owner
        split = bool(owner.split)
        real_states = [prefix.state_of(v) for v in (*rest, *kw.values()) if _is_state(v)]
        calls = attention.calls[0]
        with prefix.held_fixed(owner.layer, rest, kw, split) as (a, k, views), torch.enable_grad():
            h = x.detach().clone().requires_grad_(True)
            y = first_output(owner.layer(h, *a, **k))[0, -1]                      # (d,)
            self._rows(y, h)
        updates = sum(v.kv_updates for v in views)
        if owner.split is None and updates and any(l.get_seq_length() > 0 for v in views
                                                   for l in _kv_layers(v)):
            # probed in concat mode: the layer attends through the interface, and what it
            # attends to is what its cache returned (not so where the cache holds a latent
            # that the layer expands into keys, as multi-head latent attention does)
            returned = {shape for v in views for shape in v.returned}
            owner.split = attention.calls[0] > calls and returned <= set(attention.key_shapes)
        self.mode = "none" if not updates else "split" if split else "concat"
        if [prefix.state_of(v) for v in (*rest, *kw.values()) if _is_state(v)] != real_states:
            raise RuntimeError(f"layer {owner.index}: differentiating the call changed the model's "
                               f"cache or state")
        return y.detach()

    def _rows(self, y: torch.Tensor, h: torch.Tensor) -> None:
        t = len(self.inputs) - 1
        d = y.shape[0]
        eye = torch.eye(d, dtype=y.dtype)
        chunk = self.owner.chunk
        # torch.vmap over autograd.grad, not is_grads_batched: the latter's legacy vmap has no
        # batching rule for softmax's or SiLU's backward and loops over the cotangents there.
        # vmap runs the backward once per chunk; the last one frees the graph.
        for i in range(0, d, chunk):
            keep = i + chunk < d
            grad = torch.vmap(lambda v: torch.autograd.grad(y, h, v, retain_graph=keep)[0])
            self.jac[t, i:i + chunk] = grad(eye[i:i + chunk]).reshape(-1, d)


def _is_state(v) -> bool:
    return isinstance(v, Cache) or tensor_list(v)


def _kv_layers(view):
    return [l for l in list.__iter__(view.layers) if hasattr(l, "get_seq_length")]
