"""Null weights: the same architecture with weights that learned nothing (docs/nulls.md).

A null is named by (kind, seed). Its weights are made where they are used, one module or
one tensor at a time, from (kind, seed, the parameter's name) alone, so that a layer-local
worker (sweep/generic/local.py) makes only its resident layer, the whole-model route makes
every tensor the same way, and nothing the size of the model is ever written:

- `random_init`: the model's own `_init_weights`, module by module in the order transformers'
  `initialize_weights` visits them (children before their parent), the global RNG seeded
  before each module by `null_seed(seed, kind, module path)`. A module's init may write its
  children's tensors (a Mamba mixer sets its dt_proj bias): a decoder layer is made as one
  subtree, so every route runs those writes in the same order.
- `shuffled`: each tensor's real entries permuted by `torch.randperm` on a CPU generator
  seeded by `null_seed(seed, kind, tensor name)`: every tensor keeps its multiset of values
  (distribution, norm) and loses where they sit.

Norms and embeddings follow the same rule as every other tensor (docs/nulls.md says why).
A tensor's name is its first path in `named_modules` order (a tied tensor is made once,
under that name); every route builds the same transformers model, so the names agree.
"""
from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass

import torch

from sweep.plan import hf


@dataclass(frozen=True)
class Null:
    """Which null: `kind` ("random_init" or "shuffled") and `seed`."""

    kind: str
    seed: int


def null_seed(seed: int, kind: str, name: str) -> int:
    """A 63-bit seed from (seed, kind, name): sha256, stable across processes and machines
    (Python's hash() is salted per process)."""
    digest = hashlib.sha256(f"tdos-null/{kind}/{seed}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def shuffle(real: torch.Tensor, seed: int, name: str) -> torch.Tensor:
    """`real`'s entries permuted by the seeded generator (CPU: the same permutation on every
    device), same shape, dtype and device."""
    g = torch.Generator().manual_seed(null_seed(seed, "shuffled", name))
    perm = torch.randperm(real.numel(), generator=g)              # (numel,) int64
    return real.reshape(-1)[perm.to(real.device)].reshape(real.shape)


@contextlib.contextmanager
def _seeded(seed: int):
    """The global RNG (what init functions draw from) seeded, restored afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def post_order(module: torch.nn.Module, path: str = ""):
    """(path, module) of `module`'s subtree, children before their parent, as transformers'
    `initialize_weights` visits them; `path` is `module`'s own path in the model."""
    for name, child in module.named_children():
        yield from post_order(child, f"{path}.{name}" if path else name)
    yield path, module


def init_modules(model, modules, seed: int, dtype: torch.dtype, device: torch.device) -> None:
    """The own parameters of `modules` ((path, module), ... in post order) replaced by fresh
    float32 tensors that the model's `_init_weights` fills, each module under its own seed,
    then cast to `dtype` on `device`: a null is the same in float32 and float64, as a
    checkpoint cast up is."""
    modules = list(modules)
    for _, m in modules:
        for k, p in slots(m):
            setattr(m, k, torch.nn.Parameter(torch.empty(p.shape, dtype=torch.float32),
                                             requires_grad=False))
    with torch.no_grad():
        for path, m in modules:
            with _seeded(null_seed(seed, "random_init", path)):
                hf.init_module(model, m)
    for _, m in modules:
        for k, p in slots(m):
            setattr(m, k, torch.nn.Parameter(p.detach().to(device=device, dtype=dtype),
                                             requires_grad=False))


def slots(module: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """(name, parameter) of `module`'s own parameter slots, a tensor held twice under each name."""
    return list(module.named_parameters(recurse=False, remove_duplicate=False))


def parameter_names(model) -> dict[tuple[int, str], str]:
    """(id(module), key) of every parameter slot -> the tensor's name: the first path under
    which `named_modules` reaches it (a tied tensor's slots share one name)."""
    first: dict[int, str] = {}
    names = {}
    for path, m in model.named_modules(remove_duplicate=False):
        for k, p in slots(m):
            names[id(m), k] = first.setdefault(id(p), f"{path}.{k}" if path else k)
    return names


def embedding(model, module, path: str, shape, padding_idx, null: Null, real) -> torch.Tensor:
    """(vocab, d) = `shape`: the null's whole input embedding `module` (at `path`), float32,
    made as every route makes it: `real()` (the checkpoint's tensor) shuffled, or the module's
    own init with the padding row `padding_idx` the model was built with. The caller keeps
    the rows it needs and sets the module's weight."""
    if null.kind == "shuffled":
        return shuffle(real().float(), null.seed, f"{path}.weight")
    module.weight = torch.nn.Parameter(torch.empty(shape, device="meta"),
                                       requires_grad=False)
    kept, module.padding_idx = module.padding_idx, padding_idx
    try:
        init_modules(model, [(path, module)], null.seed, torch.float32, torch.device("cpu"))
        return module.weight.detach()
    finally:
        module.padding_idx = kept


def apply_whole(model, null: Null) -> None:
    """Every weight of a whole loaded model replaced by the null's (the fallback route and
    `tdos export-null`); tied tensors stay tied."""
    dtype = next(model.parameters()).dtype
    device = next(model.parameters()).device
    if null.kind == "shuffled":
        names = parameter_names(model)
        done: set[int] = set()
        with torch.no_grad():
            for m in model.modules():
                for k, p in slots(m):
                    if id(p) not in done:
                        done.add(id(p))
                        p.copy_(shuffle(p.detach(), null.seed, names[id(m), k]))
        return
    tied = _ties(model)
    init_modules(model, post_order(model), null.seed, dtype, device)
    for module, key, source, skey in tied:       # one tensor again, as transformers ties
        setattr(module, key, getattr(source, skey))


def _ties(model) -> list[tuple]:
    """(module, key, module, key) of every parameter slot holding a tensor first seen at
    another slot."""
    first: dict[int, tuple] = {}
    ties = []
    for _, m in model.named_modules(remove_duplicate=False):
        for k, p in slots(m):
            if id(p) in first and first[id(p)] != (m, k):
                ties.append((m, k, *first[id(p)]))
            first.setdefault(id(p), (m, k))
    return ties
