"""A member of the quantization ensemble: a GGUF tensor's dequantized weights, each moved by a
seeded uniform draw within its own rounding bin (docs/nulls.md "The quantization ensemble").

Member `seed` of tensor `name` draws u ~ U[-1/2, 1/2) per weight from a numpy PCG64 seeded by
`null_seed(seed, "quantization", name)` (sha256: the same on every process and route), over
the whole tensor in the file's element order, so a worker that reads only some rows (the
embedding) moves them as the whole route does. The weight then moves by u times the gap to
its neighbour on u's side: the step |a| of its block (both sides, `sweep.plan.quantized`),
or for F16 / BF16 the distance to the next representable value below or above. F32 and F64
tensors are returned unchanged.
"""
from __future__ import annotations

import numpy as np

from sweep.generic.null import null_seed
from sweep.plan.quantized import EXACT, ROUNDED, UNIT


def gaps(data: np.ndarray, qtype) -> tuple[np.ndarray, np.ndarray]:
    """(below, above), float64 of the dequantized shape: the distance from each weight to the
    representable value below and above it; a block format's are both its step |a|.
    `data` is the tensor as gguf's GGUFReader holds it (`tensor.data`, rows of raw blocks for
    the block formats), `qtype` its `tensor_type`."""
    from gguf import dequantize

    if qtype.name in UNIT:
        from gguf.constants import GGML_QUANT_SIZES

        _, size = GGML_QUANT_SIZES[qtype]
        unit = np.array(data, dtype=np.uint8).reshape(-1, size)        # (n_blocks, bytes)
        for start, stop, byte in UNIT[qtype.name]:
            unit[:, start:stop] = byte
        step = np.abs(dequantize(unit.reshape(data.shape), qtype).astype(np.float64))
        return step, step
    if qtype.name in ROUNDED:
        return _neighbours(data, qtype.name)
    if qtype.name in EXACT:
        zero = np.zeros(dequantize(data, qtype).shape)
        return zero, zero
    raise ValueError(f"{qtype.name}: no known rounding step")


def _neighbours(data: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(below, above) of 16-bit floats: the gaps to the values whose bit patterns are one
    magnitude step away (through zero at ±0); 0 at inf and nan (left as they are), and at the
    largest finite value the gap below on both sides (beyond it lies inf)."""
    bits = np.ascontiguousarray(data).view(np.uint16)
    if kind == "BF16":      # bf16 is the upper half of a float32
        def value(b):
            return (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    else:
        def value(b):
            return b.view(np.float16).astype(np.float64)
    x = value(bits)
    sign, mag = bits & 0x8000, bits & 0x7FFF
    away = np.abs(value(sign | (mag + 1)) - x)
    toward = np.abs(x - value(np.where(mag > 0, sign | (mag - 1), (sign ^ 0x8000) | 1).astype(np.uint16)))
    away = np.where(np.isfinite(away), away, toward)
    finite = np.isfinite(x)
    above = np.where(finite, np.where(sign == 0, away, toward), 0.0)
    below = np.where(finite, np.where(sign == 0, toward, away), 0.0)
    return below, above


def draw(seed: int, name: str, shape: tuple[int, ...], rows=None) -> np.ndarray:
    """u ~ U[-1/2, 1/2), float64 of `shape`: member `seed`'s draw for tensor `name`; with
    `rows`, only those rows of it (the stream advanced to each row: one 64-bit output per
    float64, so the embedding's rows of a sequence cost their own size, not the table's)."""
    key = null_seed(seed, "quantization", name)
    if rows is None:
        return np.random.Generator(np.random.PCG64(key)).random(shape) - 0.5
    width = int(np.prod(shape[1:], dtype=np.int64))
    out = np.empty((len(rows), *shape[1:]))
    for i, r in enumerate(rows):
        bits = np.random.PCG64(key)
        bits.advance(int(r) * width)
        out[i] = np.random.Generator(bits).random(shape[1:]) - 0.5
    return out


def _shape(data: np.ndarray, qtype) -> tuple[int, ...]:
    """The dequantized shape of `data`: the reader's last axis counts bytes for the block
    formats and BF16 (uint8), elements otherwise."""
    if data.dtype != np.uint8:
        return data.shape
    from gguf.constants import GGML_QUANT_SIZES

    block, size = GGML_QUANT_SIZES[qtype]
    return (*data.shape[:-1], data.shape[-1] // size * block)


def perturbed(data: np.ndarray, qtype, seed: int, name: str, rows=None) -> np.ndarray:
    """Tensor `name` of member `seed`: its dequantized weights (float64, the dequantized shape
    gguf gives) each moved by u·gap within its bin; with `rows` (int indices into the first
    axis), only those rows, moved as in the whole tensor."""
    from gguf import dequantize

    if qtype.name in EXACT:
        w = dequantize(data if rows is None else data[rows], qtype)
        return w.astype(np.float64)
    u = draw(seed, name, _shape(data, qtype), rows)
    if rows is not None:
        data = data[rows]
    below, above = gaps(data, qtype)
    w = dequantize(data, qtype).astype(np.float64)
    return w + u * np.where(u < 0, below, above)

