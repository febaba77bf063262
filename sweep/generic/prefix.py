"""Holding the prefix fixed while one layer call is differentiated.

`held_fixed(layer, args, kwargs)` returns the arguments of a copy of the call: every Cache is
replaced by a `PrefixView`, every other tensor argument is cloned (RWKV's state list is
updated in place by the layer), and the layer's own module-held tensors (RecurrentGemma keeps
its recurrent and convolution states on its modules) are cloned before the call and put
back after it. The model's real cache and states are never touched, which `check_untouched`
asserts after each call.

transformers' Mamba-style decode kernels (their reference PyTorch implementations) update
conv/SSM states in place after autograd has saved them for the backward (the cache's, or a
clone made inside the op); autograd does not check tensors packed by a saved-tensor hook, so
the hook in `held_fixed` copies, at save time, every saved tensor outside the graph that is
not a weight, and the backward sees the values the forward used.
"""
from __future__ import annotations

import contextlib
import copy

import torch
from transformers.cache_utils import Cache

from sweep.generic import attention
from sweep.checkpoints import hf


def tensors(obj):
    """Every tensor inside a (nested) dict, list or tuple."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from tensors(v)


def cloned(obj):
    """A copy of `obj` with every tensor inside cloned (containers rebuilt, others shared)."""
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, dict):
        return {k: cloned(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(cloned(v) for v in obj)
    return obj


class _CopiedLayers(list):
    """The cache's per-layer objects, each copied (its states cloned, its keys and values
    shared) the first time it is indexed: only the layer being differentiated pays."""

    def __init__(self, layers):
        super().__init__(layers)
        self._copied: set[int] = set()

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        i %= len(self)
        if i not in self._copied:
            src = list.__getitem__(self, i)
            dup = copy.copy(src)
            for name, value in hf.attributes(src).items():
                if name not in ("keys", "values"):           # read only: never mutated in place
                    setattr(dup, name, cloned(value))
            list.__setitem__(self, i, dup)
            self._copied.add(i)
        return list.__getitem__(self, i)

    def __iter__(self):
        return (self[i] for i in range(len(self)))


class PrefixView(Cache):
    """The model's cache as the prefix it holds: a layer call through it sees exactly the
    earlier tokens' keys, values and states, and leaves the real cache as it was.

    With `split`, a key/value update returns the new token's keys and values alone and hands
    the prefix's to the registered attention function (`attention.held_prefix`); without it,
    the update returns their concatenation, as the model's own cache does (used for layers
    that do not attend through the attention interface, e.g. BLOOM's ALiBi attention).
    """

    def __init__(self, real: Cache, split: bool):
        hf.attributes(self).update(hf.attributes(real))     # the cache's own flags and config
        self.layers = _CopiedLayers(real.layers)
        self.split = split
        self.kv_updates = 0
        self.returned: list[tuple] = []      # shapes of the keys each update returned

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        self.kv_updates += 1
        layer = self.layers[layer_idx]
        held = attention.held_prefix.get()
        if self.split and held is not None and layer.get_seq_length() > 0:
            # the visible prefix as the model's cache layer returns it (a sliding window keeps
            # only its last tokens), computed from detached copies
            keys, values = copy.copy(layer).update(key_states.detach(), value_states.detach(),
                                                   *args, **kwargs)
            n = key_states.shape[-2]
            held.append((keys[..., :-n, :], values[..., :-n, :]))
            return key_states, value_states
        keys, values = super().update(key_states, value_states, layer_idx, *args, **kwargs)
        self.returned.append(tuple(keys.shape))
        return keys, values


@contextlib.contextmanager
def held_fixed(layer: torch.nn.Module, args: tuple, kwargs: dict, split: bool):
    """(args, kwargs, views) for a differentiable copy of `layer(*args, **kwargs)`.

    Inside the block the layer's module-held tensors are clones and autograd keeps copies of
    the tensors the call mutates in place; on exit every module attribute the call set,
    added or replaced is restored and `attention.held_prefix` is cleared.
    """
    views: list[PrefixView] = []

    def substitute(v):
        if isinstance(v, Cache):
            views.append(PrefixView(v, split))
            return views[-1]
        return cloned(v)

    args = tuple(substitute(a) for a in args)
    kwargs = {k: substitute(v) for k, v in kwargs.items()}
    snapshot = [(m, dict(hf.attributes(m))) for m in layer.modules()]
    for m, before in snapshot:
        for name, v in before.items():
            if isinstance(v, torch.Tensor) and not name.startswith("_"):
                object.__setattr__(m, name, v.clone())

    token = attention.held_prefix.set([])
    try:
        with torch.autograd.graph.saved_tensors_hooks(_pack, lambda t: t):
            yield args, kwargs, views
    finally:
        attention.held_prefix.reset(token)
        for m, before in snapshot:
            now = hf.attributes(m)
            for name in [n for n in now if n not in before]:
                del now[name]
            now.update(before)


def _pack(t: torch.Tensor) -> torch.Tensor:
    """What autograd saves for the backward. It skips its in-place check on tensors packed by
    a hook, so every saved tensor outside the graph that is not a weight is copied: a later
    in-place update of it (a cache copy's state; the state transformers' Mamba-2 decode step
    clones and then updates in place after using it) must not reach the backward."""
    if t.requires_grad or isinstance(t, torch.nn.Parameter) or isinstance(hf.tensor_base(t), torch.nn.Parameter):
        return t
    return t.clone()


def state_of(cache) -> tuple:
    """Identity and version of every tensor a cache holds (to assert it was not touched)."""
    if isinstance(cache, Cache):
        return tuple((id(t), hf.tensor_version(t)) for layer in cache.layers
                     for t in tensors(hf.attributes(layer)))
    return tuple((id(t), hf.tensor_version(t)) for t in tensors(cache))


def module_state(model: torch.nn.Module) -> list:
    """The model's module-held state: every public attribute of every module that holds a
    tensor (not a parameter or buffer) or None. RecurrentGemma keeps its recurrent and
    convolution states there, read by the next decode step."""
    return [(m, {k: v for k, v in hf.attributes(m).items()
                 if not k.startswith("_") and (v is None or isinstance(v, torch.Tensor))})
            for m in model.modules()]


def restore_state(snapshot: list) -> None:
    """Put back a `module_state` snapshot, dropping tensor attributes added since."""
    for m, held in snapshot:
        now = hf.attributes(m)
        for k in [k for k, v in now.items() if k not in held and not k.startswith("_")
                  and isinstance(v, torch.Tensor)]:
            del now[k]
        now.update(held)
