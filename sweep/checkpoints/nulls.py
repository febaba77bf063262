"""The null kinds of tdos (docs/nulls.md, "The kinds"): weights that keep one property of the
trained ones and break the rest, each a `Maker` registered in kinds.py.

- `RandomInit`: the model's own `_init_weights`, module by module in the order transformers'
  `initialize_weights` visits them (children before their parent), the global RNG seeded
  before each module by its path. A module's init may write its children's tensors (a Mamba
  mixer sets its dt_proj bias): a decoder layer is made as one subtree, so every route runs
  those writes in the same order.
- `Shuffled`: each tensor's real entries permuted by `torch.randperm` on a CPU generator seeded
  by the tensor's name: every tensor keeps its multiset of values, loses where they sit.

Norms and embeddings follow the same rule as every other tensor of their kind.
"""
from __future__ import annotations

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
