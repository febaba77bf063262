"""The ensemble kind of tdos: a member of a quantized checkpoint's quantization ensemble
(docs/nulls.md, "The quantization ensemble"), a `Maker` registered in kinds.py.

Member `seed` of tensor `name` draws u ~ U[-1/2, 1/2) per stored weight from a numpy PCG64
seeded by (seed, the stored tensor's name) (sha256: the same on every process and route),
over the whole tensor in the file's element order, so a worker that reads only some rows (the
embedding) moves them as the whole route does. The reader then moves each weight by u times
the gap to its neighbour on u's side, within its rounding bin (gguf_tensors.py, the one place
that knows the bins), before transformers' processor puts it into the model's layout.
"""
from __future__ import annotations

import numpy as np

from sweep.checkpoints.makers import Maker, null_seed
from sweep.errors import ConfigError

# the salt of the draws: kept from the stores of format 5, so a member is drawn as it was
SALT = "quantization"


def draw(seed: int, name: str, shape: tuple[int, ...], rows=None) -> np.ndarray:
    """u ~ U[-1/2, 1/2), float64 of `shape`: member `seed`'s draw for tensor `name`; with
    `rows`, only those rows of it (the stream advanced to each row: one 64-bit output per
    float64, so the embedding's rows of a sequence cost their own size, not the table's)."""
    key = null_seed(seed, SALT, name)
    if rows is None:
        return np.random.Generator(np.random.PCG64(key)).random(shape) - 0.5
    width = int(np.prod(shape[1:], dtype=np.int64))
    out = np.empty((len(rows), *shape[1:]))
    for i, r in enumerate(rows):
        bits = np.random.PCG64(key)
        bits.advance(int(r) * width)
        out[i] = np.random.Generator(bits).random(shape[1:]) - 0.5
    return out


def draws(seed: int):
    """Member `seed`'s draw as a reader's `moved(name, shape, rows)`."""
    return lambda name, shape, rows=None: draw(seed, name, shape, rows)


class Quantized(Maker):
    """Member `seed`: every stored weight moved within its own rounding bin."""

    def __init__(self, variant):
        super().__init__(variant)
        self.moved = draws(variant.seed)

    def check(self, checkpoint, where: str) -> dict[str, int]:
        """{tensor type: how many} of the file, or a one-line ConfigError: not a quantized
        file, nothing rounded in it, a type without a known step, or read only whole."""
        fix = f"remove `quantization:` from {where.rsplit('.', 1)[0]}"
        rounding = checkpoint.rounding(where)
        if rounding is None:
            raise ConfigError(f"{where}: {checkpoint.name} is not a GGUF file; its weights carry no "
                              f"quantization step to draw within — {fix}")
        stepped, exact = rounding
        if not stepped:
            raise ConfigError(f"{where}: {checkpoint.name} is not quantized (every tensor is "
                              f"{'/'.join(sorted(exact))}) — {fix}")
        if checkpoint.not_local():
            raise ConfigError(f"{where}: {checkpoint.name}: {checkpoint.not_local()}, so its members "
                              f"cannot be drawn tensor by tensor — {fix}")
        return {**stepped, **exact}

    def read(self, checkpoint, key: str, rows=None):
        return checkpoint.tensor(key, rows, moved=self.moved)

    def whole(self, model, checkpoint, layers) -> None:
        """Every parameter the file gives read again, moved, as the layer-local route reads it."""
        import torch

        checkpoint.bind(model)
        with torch.no_grad():
            for key, p in model.named_parameters():
                if key in checkpoint.sources:
                    p.copy_(self.read(checkpoint, key))
