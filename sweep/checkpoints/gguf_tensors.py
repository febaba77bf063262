"""A GGUF file's bytes: its tensor table, each tensor's bytes memory-mapped, their
dequantization by the `gguf` package, and each stored weight's rounding bin. Part of the GGUF
reader (gguf_file.py): the only module that calls `gguf.dequantize`.

`GgufFile` is the file memory-mapped: its metadata (string arrays counted, not read) and
tensor table read by transformers' own GGUF reader (the one door, hf.py), each tensor's bytes
a view of the map, rows first, so a worker unpacks only the rows it reads.

**Rounding bins** (the quantization ensemble, docs/nulls.md). A block format stores each weight
as an integer code q and, per block or sub-block, a scale a (and maybe an offset b):
w = a·q + b. Rounding to the nearest code moved the trained weight by at most half a step |a|,
so the step of every weight is |a| of its (sub-)block: one scale for Q4_0 … Q8_0 (blocks of
32), the super-block scale d times the sub-block's 6- or 8-bit scale for the K-quants
(llama.cpp's ggml-common.h declares the blocks; gguf.constants GGML_QUANT_SIZES their sizes).
The step is read without decoding any scale here: a copy of every block with its codes set
so that each weight's code is one above the format's zero and its offsets (m, dmin) set to
zero dequantizes, through gguf's own dequantizer, to exactly ±a at every weight. `UNIT`
holds, per type, the byte ranges of a block and the byte written there to make that copy; an
entry is a fact about the block layout, checked by tests/test_quantization.py against gguf's
quantizer (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and against the code lattice of random K-quant
blocks. F16 and BF16 round to the nearest representable value: their bin is half the distance
to each neighbour. F32 and F64 (norms, biases) are taken as exact.
"""
from __future__ import annotations

import functools
import math
import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

from sweep.errors import ConfigError, first_line

# type name -> ((start, stop, byte), ...): the fills of one block that leave every weight at
# w = ±a (its step): codes one above the format's zero, offsets zeroed
UNIT = {
    "Q4_0": ((2, 18, 0x99),),                          # d | 16 B nibbles, w = d(q-8): q = 9
    "Q4_1": ((2, 4, 0x00), (4, 20, 0x11)),             # d m | nibbles, w = dq+m: m = 0, q = 1
    "Q5_0": ((2, 6, 0xFF), (6, 22, 0x11)),             # d | qh 4 B | nibbles, w = d(q-16): q = 17
    "Q5_1": ((2, 8, 0x00), (8, 24, 0x11)),             # d m | qh | nibbles: m = 0, q = 1
    "Q8_0": ((2, 34, 0x01),),                          # d | 32 int8, w = dq: q = 1
    "Q2_K": ((16, 80, 0x55), (82, 84, 0x00)),          # scales 16 | qs 64 | d dmin: q = 1, dmin = 0
    "Q3_K": ((0, 32, 0xFF), (32, 96, 0x55)),           # hmask 32 | qs 64 | scales 12 | d: q = 1
    "Q4_K": ((2, 4, 0x00), (16, 144, 0x11)),           # d dmin | scales 12 | qs 128: dmin = 0, q = 1
    "Q5_K": ((2, 4, 0x00), (16, 48, 0x00), (48, 176, 0x11)),   # … | qh 32 | qs 128
    "Q6_K": ((0, 128, 0x11), (128, 192, 0xAA)),        # ql 128 | qh 64 | scales | d: q-32 = 1
}
ROUNDED = ("F16", "BF16")            # nearest-value rounding: the bin is half a gap each side
EXACT = ("F32", "F64")               # no rounding step: left as they are
STEPPED = (*UNIT, *ROUNDED)


class Tensor(NamedTuple):
    name: str
    shape: tuple[int, ...]        # torch order
    qtype: object                 # gguf.GGMLQuantizationType
    start: int                    # byte offset in the file
    nbytes: int


class GgufFile:
    """A GGUF file memory-mapped: `metadata` (string arrays as their length), `tensors`
    {name: Tensor}, and `data(name)` the tensor's bytes as the `gguf` package dequantizes
    them: (..., bytes per row) for a block type, the float values' bytes otherwise."""

    def __init__(self, file: Path):
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

        from sweep.checkpoints import hf

        self.file = file
        self.metadata, entries, data_start = hf.gguf_table(file)
        self.tensors: dict[str, Tensor] = {}
        for name, shape, ggml_type, offset in entries:
            qtype = GGMLQuantizationType(ggml_type)
            block, size = GGML_QUANT_SIZES[qtype]
            self.tensors[name] = Tensor(name, tuple(shape), qtype, data_start + offset,
                                        math.prod(shape) // block * size)
        self._blob = np.memmap(file, mode="r", dtype=np.uint8)

    @property
    def architecture(self) -> str:
        return self.metadata["general.architecture"]

    def data(self, name: str):
        """Tensor `name`'s bytes, a view of the map (uint8, rows first: rows can be cut)."""
        from gguf import GGML_QUANT_SIZES

        t = self.tensors[name]
        block, size = GGML_QUANT_SIZES[t.qtype]
        raw = self._blob[t.start:t.start + t.nbytes]
        return raw.reshape(*t.shape[:-1], t.shape[-1] // block * size)

    def values(self, name: str, rows=None, moved=None) -> np.ndarray:
        """Tensor `name` dequantized (float32 as gguf gives it; float64 when `moved`), in the
        file's layout; with `rows` (int indices into the first axis), only those rows; with
        `moved(name, shape, rows) -> u`, every weight moved by u times its rounding gap."""
        from gguf import dequantize

        whole = self.data(name)
        qtype = self.tensors[name].qtype
        if moved is None:
            return dequantize(whole if rows is None else whole[rows], qtype)
        return perturbed(whole, qtype, moved, name, rows)

    def rounding(self, where: str) -> tuple[dict[str, int], dict[str, int]]:
        """({type: how many} of the tensors rounded to a known step, {type: how many} of those
        stored exactly); ConfigError naming a type whose step tdos does not know."""
        types: dict[str, int] = {}
        for t in self.tensors.values():
            types[t.qtype.name] = types.get(t.qtype.name, 0) + 1
        unknown = sorted(set(types) - set(STEPPED) - set(EXACT))
        if unknown:
            raise ConfigError(f"{where}: {self.file} holds {', '.join(unknown)} tensors, whose step "
                              f"tdos does not know (it knows {', '.join(STEPPED)}) — remove "
                              f"`quantization:` from {where.rsplit('.', 1)[0]}")
        return ({t: n for t, n in types.items() if t in STEPPED},
                {t: n for t, n in types.items() if t in EXACT})

    def check_types(self, where: str) -> None:
        """Every tensor type in the file can be dequantized: the first row of one tensor of each
        type is (the `gguf` package raises NotImplementedError for a type it cannot unpack)."""
        from gguf import dequantize

        seen: dict = {}
        for t in self.tensors.values():
            seen.setdefault(t.qtype, t)
        for qtype, t in seen.items():
            data = self.data(t.name)
            try:
                dequantize(data[:1] if data.ndim > 1 else data, qtype)
            except NotImplementedError:
                raise ConfigError(f"{where}: {self.file}: tensor {t.name} is of type {qtype.name}, "
                                  f"which the gguf package cannot dequantize — convert it with another "
                                  f"quantization (F16, Q8_0, Q4_K, ...)") from None
            except Exception as e:  # a block shorter than its type's: the tensor table is damaged
                raise ConfigError(f"{where}: {self.file}: tensor {t.name} ({qtype.name}) cannot be "
                                  f"read ({type(e).__name__}: {first_line(e)}) — re-download or "
                                  f"re-convert it") from None


def state(file: Path) -> tuple:
    """What changes whenever the file is rewritten (the key of the readers' caches)."""
    s = os.stat(file)
    return (str(file), s.st_size, s.st_mtime_ns, s.st_ctime_ns, s.st_ino)


@functools.lru_cache(maxsize=4)
def _open(key: tuple) -> GgufFile:
    return GgufFile(Path(key[0]))


def read_header(file: Path, where: str) -> GgufFile:
    """The file memory-mapped (no tensor is read); a ConfigError when it is not a GGUF,
    truncated or corrupt, or holds a tensor of a type the `gguf` package does not know."""
    try:
        g = _open(state(file))
    except Exception as e:  # struct errors, ValueError, UnicodeDecodeError for damaged files
        raise ConfigError(f"{where}: {file}: not a readable GGUF file, truncated or corrupt "
                          f"({type(e).__name__}: {first_line(e)}) — re-download or re-convert "
                          f"it") from None
    size = file.stat().st_size
    for t in g.tensors.values():
        if t.start + t.nbytes > size:
            raise ConfigError(f"{where}: {file}: truncated: tensor {t.name} ends at byte "
                              f"{t.start + t.nbytes}, the file has {size} — re-download or "
                              f"re-convert it")
    return g


# ---- rounding bins --------------------------------------------------------------------------
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


def _shape(data: np.ndarray, qtype) -> tuple[int, ...]:
    """The dequantized shape of `data`: the reader's last axis counts bytes for the block
    formats and BF16 (uint8), elements otherwise."""
    if data.dtype != np.uint8:
        return data.shape
    from gguf.constants import GGML_QUANT_SIZES

    block, size = GGML_QUANT_SIZES[qtype]
    return (*data.shape[:-1], data.shape[-1] // size * block)


def perturbed(data: np.ndarray, qtype, moved, name: str, rows=None) -> np.ndarray:
    """Tensor `name`'s raw `data` (as gguf's GGUFReader holds it) dequantized to float64, each
    weight moved by u·gap within its bin, u = moved(name, dequantized shape, rows); with `rows`
    (int indices into the first axis), only those rows, moved as in the whole tensor."""
    from gguf import dequantize

    if qtype.name in EXACT:
        return dequantize(data if rows is None else data[rows], qtype).astype(np.float64)
    u = moved(name, _shape(data, qtype), rows)
    if rows is not None:
        data = data[rows]
    below, above = gaps(data, qtype)
    return dequantize(data, qtype).astype(np.float64) + u * np.where(u < 0, below, above)
