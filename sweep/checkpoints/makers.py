"""How a weight variant's weights are made (docs/nulls.md): the interface one kind implements
(`Maker`), registered by name in kinds.py, and what every kind shares.

A variant's weights are made where they are used, one tensor or one module at a time, from
(kind, seed, the tensor's name) and the trained checkpoint alone, so that a layer-local
worker (sweep/generic/local.py) makes only its resident layer and the embedding rows of its
sequence, the whole-model route (`Maker.whole`: a worker that falls back, `tdos export-null`)
makes every tensor the same way, and nothing the size of the model is ever written.

A tensor's name is its first path in `named_modules` order (a tied tensor is made once, under
that name); every route builds the same transformers model, so the names agree, and so do
the seeds drawn from them (`seed_of`: sha256, stable across processes and machines).
"""
from __future__ import annotations

import contextlib
import hashlib

import torch

from sweep.checkpoints import hf


def null_seed(seed: int, kind: str, name: str) -> int:
    """A 63-bit seed from (seed, kind, name): sha256, stable across processes and machines
    (Python's hash() is salted per process)."""
    digest = hashlib.sha256(f"tdos-null/{kind}/{seed}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class Maker:
    """One variant's weights from its trained checkpoint's. The base class is the trained
    model itself (the variant None); a kind overrides what it changes:

    - `source(name)`: the trained tensor that the variant's tensor `name` is made from;
    - `read(checkpoint, key, rows)`: that tensor as the checkpoint gives it (a member of the
      quantization ensemble moves the stored weights within their rounding bins here);
    - `tensor(name, real)`: the variant's tensor `name` from the trained one (same shape,
      dtype and device), made whole unless `rowwise` (then some rows of it are made from those
      rows alone: the layer-local route reads a sequence's embedding rows only);
    - `reads = False` and `init(...)`: a kind that makes whole modules without reading them
      (random_init: the model's own init);
    - `check(checkpoint, where)`: the plan's one-line refusal of a checkpoint it cannot vary;
    - `bind(model, layers)`: whatever it needs of the model the weights go into.
    """

    reads = True            # tensors come from the checkpoint (else from `init`)
    rowwise = True          # tensor(name, real) of some rows is those rows of the whole one

    def __init__(self, variant):
        self.variant = variant          # sweep.format.variants.Variant, or None: trained

    @property
    def seed(self) -> int:
        return self.variant.seed

    def seed_of(self, name: str, salt: str | None = None) -> int:
        """The seed of this variant's draw for tensor or module `name`."""
        return null_seed(self.variant.seed, salt or self.variant.kind, name)

    def check(self, checkpoint, where: str) -> None:
        """A ConfigError (one line, naming `where`) when this kind cannot vary `checkpoint`."""

    def bind(self, model, layers) -> None:
        """Called with the model the weights go into and its decoder layers, before any tensor."""

    def source(self, name: str) -> str:
        return name

    def read(self, checkpoint, key: str, rows=None):
        return checkpoint.tensor(key, rows)

    def tensor(self, name: str, real: torch.Tensor) -> torch.Tensor:
        return real

    def init(self, model, modules, dtype: torch.dtype, device: torch.device) -> None:
        """The parameters of `modules` ((path, module), ... in post order) made (kinds that do
        not read)."""
        raise NotImplementedError(f"{type(self).__name__} reads its tensors")

    def embedding(self, model, module, path: str, shape, padding_idx, real) -> torch.Tensor:
        """(vocab, d) = `shape`: the variant's whole input embedding `module` (at `path`),
        float32, as every route makes it; `real()` reads the trained one. The caller keeps the
        rows it needs."""
        return self.tensor(f"{path}.weight", real().float())

    def whole(self, model, checkpoint, layers) -> None:
        """Every parameter of a whole loaded model replaced by the variant's, each made from
        the loaded tensors as the layer-local route makes it from the checkpoint's; tied
        tensors stay tied (each is written once, in place)."""
        self.bind(model, layers)
        names = parameter_names(model)
        params: dict[str, torch.nn.Parameter] = {}
        for m in model.modules():
            for k, p in slots(m):
                params.setdefault(names[id(m), k], p)
        moved = {n: self.source(n) for n in params if self.source(n) != n}
        kept = {s: params[s].detach().clone() for s in set(moved.values())}   # read before written
        with torch.no_grad():
            for n, p in params.items():
                real = kept[moved[n]] if n in moved else p.detach()
                made = self.tensor(n, real)
                if n in moved or made is not real:      # else: the trained tensor, kept
                    p.copy_(made)


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


def post_order(module: torch.nn.Module, path: str = ""):
    """(path, module) of `module`'s subtree, children before their parent, as transformers'
    `initialize_weights` visits them; `path` is `module`'s own path in the model."""
    for name, child in module.named_children():
        yield from post_order(child, f"{path}.{name}" if path else name)
    yield path, module


@contextlib.contextmanager
def seeded(seed: int):
    """The global RNG (what init functions draw from) seeded, restored afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def init_modules(model, modules, seed_of, dtype: torch.dtype, device: torch.device) -> None:
    """The own parameters of `modules` ((path, module), ... in post order) replaced by fresh
    float32 tensors that the model's `_init_weights` fills, each module under `seed_of(path)`,
    then cast to `dtype` on `device`: the weights are the same in float32 and float64, as a
    checkpoint cast up is."""
    modules = list(modules)
    for _, m in modules:
        for k, p in slots(m):
            setattr(m, k, torch.nn.Parameter(torch.empty(p.shape, dtype=torch.float32),
                                             requires_grad=False))
    with torch.no_grad():
        for path, m in modules:
            with seeded(seed_of(path)):
                hf.init_module(model, m)
    for _, m in modules:
        for k, p in slots(m):
            setattr(m, k, torch.nn.Parameter(p.detach().to(device=device, dtype=dtype),
                                             requires_grad=False))


def ties(model) -> list[tuple]:
    """(module, key, module, key) of every parameter slot holding a tensor first seen at
    another slot."""
    first: dict[int, tuple] = {}
    found = []
    for _, m in model.named_modules(remove_duplicate=False):
        for k, p in slots(m):
            if id(p) in first and first[id(p)] != (m, k):
                found.append((m, k, *first[id(p)]))
            first.setdefault(id(p), (m, k))
    return found
