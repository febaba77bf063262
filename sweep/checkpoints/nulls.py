"""The null kinds of tdos (docs/nulls.md, "The kinds"): weights that keep one property of the
trained ones and break the rest, each a `Maker` registered in kinds.py.

- `RandomInit`: the model's own `_init_weights`, module by module in the order transformers'
  `initialize_weights` visits them (children before their parent), the global RNG seeded
  before each module by its path. A module's init may write its children's tensors (a Mamba
  mixer sets its dt_proj bias): a decoder layer is made as one subtree, so every route runs
  those writes in the same order.
- `Shuffled`: each tensor's real entries permuted by `torch.randperm` on a CPU generator seeded
  by the tensor's name: every tensor keeps its multiset of values, loses where they sit.
- `Gaussian`: each tensor drawn iid normal with the trained tensor's own mean and standard
  deviation: its scale kept, its values and their arrangement not.
- `ShuffledLayers`: the trained decoder layers in a seeded order (a derangement among the
  layers of one shape), the embedding, final norm and head kept: every layer trained, the
  residual basis they share kept, which layer feeds which broken.

Norms and embeddings follow the same rule as every other tensor of their kind.
"""
from __future__ import annotations

import numpy as np
import torch

from sweep.checkpoints.makers import Maker, init_modules, post_order, ties


class RandomInit(Maker):
    """The same architecture, weights from its own init under seeds of the module paths."""

    reads = False
    rowwise = False

    def init(self, model, modules, dtype: torch.dtype, device: torch.device) -> None:
        init_modules(model, modules, self.seed_of, dtype, device)

    def embedding(self, model, module, path: str, shape, padding_idx, real) -> torch.Tensor:
        # the module's own init, with the padding row the model was built with
        module.weight = torch.nn.Parameter(torch.empty(shape, device="meta"), requires_grad=False)
        kept, module.padding_idx = module.padding_idx, padding_idx
        try:
            self.init(model, [(path, module)], torch.float32, torch.device("cpu"))
            return module.weight.detach()
        finally:
            module.padding_idx = kept

    def whole(self, model, checkpoint, layers) -> None:
        p = next(model.parameters())
        tied = ties(model)
        self.init(model, post_order(model), p.dtype, p.device)
        for module, key, source, skey in tied:       # one tensor again, as transformers ties
            setattr(module, key, getattr(source, skey))


class Shuffled(Maker):
    """Each tensor's entries permuted (the same permutation on every device)."""

    rowwise = False

    def tensor(self, name: str, real: torch.Tensor) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed_of(name))
        perm = torch.randperm(real.numel(), generator=g)              # (numel,) int64
        return real.reshape(-1)[perm.to(real.device)].reshape(real.shape)


class Gaussian(Maker):
    """Each tensor iid N(mean, sd²) of its own trained entries (sd over all of them, ddof 0):
    a float32 standard normal draw on a CPU generator seeded by the tensor's name, scaled in
    float32, so float32 and float64 sweeps hold the same values (as a checkpoint cast up)."""

    rowwise = False

    def tensor(self, name: str, real: torch.Tensor) -> torch.Tensor:
        mean, sd = _moments(real)
        g = torch.Generator().manual_seed(self.seed_of(name))
        z = torch.randn(real.shape, generator=g, dtype=torch.float32)
        return (z * sd + mean).to(device=real.device, dtype=real.dtype)


def _moments(t: torch.Tensor) -> tuple[float, float]:
    """(mean, sd) of every entry of `t`, sd with ddof 0, summed in float64 (the copy freed on
    return, before the draw)."""
    x = t.detach().to("cpu", torch.float64)
    return float(x.mean()), float(x.std(correction=0))


class ShuffledLayers(Maker):
    """Decoder layer l holds trained layer `order[l]`'s tensors (module doc)."""

    def bind(self, model, layers) -> None:
        paths = {id(m): p for p, m in model.named_modules()}
        self.prefixes = [paths[id(layer)] for layer in layers]
        text = model.config.get_text_config()
        kinds = getattr(text, "layer_types", None) or [None] * len(layers)
        self.order = layer_order(self.seed_of("layers"),
                                 [_signature(layer, kinds[i]) for i, layer in enumerate(layers)])

    def source(self, name: str) -> str:
        for layer, prefix in enumerate(self.prefixes):
            if name.startswith(prefix + "."):
                return self.prefixes[self.order[layer]] + name[len(prefix):]
        return name


def _signature(layer: torch.nn.Module, kind) -> tuple:
    """What a layer's slot needs of the layer put there: its class, every parameter's name and
    shape, and the config's type for that position (sliding or full attention, ...)."""
    return (type(layer).__name__, kind,
            tuple((k, tuple(p.shape)) for k, p in layer.named_parameters()))


def layer_order(seed: int, signatures: list) -> tuple[int, ...]:
    """order[l]: the trained layer at position l. Among the layers of one signature, a
    derangement drawn uniformly (by rejection) from numpy's PCG64 seeded by `seed`: no layer
    stays at its own depth; a layer without a twin of its signature does."""
    rng = np.random.Generator(np.random.PCG64(seed))
    order = list(range(len(signatures)))
    groups: dict = {}
    for i, s in enumerate(signatures):
        groups.setdefault(s, []).append(i)
    for members in groups.values():
        if len(members) < 2:
            continue
        while True:
            perm = rng.permutation(len(members))
            if not np.any(perm == np.arange(len(members))):
                break
        for i, j in zip(members, perm):
            order[i] = members[int(j)]
    return tuple(order)
