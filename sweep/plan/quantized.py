"""Which GGUF tensor types have a rounding step, and a model's `quantization:` held against
its file (the quantization ensemble, docs/nulls.md "The quantization ensemble").

A block format stores each weight as an integer code q and, per block or sub-block, a scale
a (and maybe an offset b): w = a·q + b. Rounding to the nearest code moved the trained weight
by at most half a step |a|, so the step of every weight is |a| of its (sub-)block: one scale
for Q4_0 … Q8_0 (blocks of 32), the super-block scale d times the sub-block's 6- or 8-bit
scale for the K-quants (llama.cpp's ggml-common.h declares the blocks; gguf.constants
GGML_QUANT_SIZES gives their sizes).

The step is read without decoding any scale here: a copy of every block with its codes set
so that each weight's code is one above the format's zero and its offsets (m, dmin) set to
zero dequantizes, through gguf's own dequantizer, to exactly ±a at every weight. `UNIT` holds,
per type, the byte ranges of a block and the byte written there to make that copy; an entry
is a fact about the block layout, checked by tests/test_quantization.py against gguf's
quantizer (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and against the code lattice of random K-quant blocks.

F16 and BF16 round to the nearest representable value: their bin is half the distance to
each neighbour (`sweep.generic.quant`). F32 and F64 (norms, biases) are taken as exact.
"""
from __future__ import annotations

from pathlib import Path

from sweep.errors import ConfigError

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


def tensor_types(path: Path, where: str) -> dict[str, int]:
    """{GGUF tensor type name: how many tensors of it} of file `path` (its header only)."""
    from sweep.plan.gguf_file import read_header

    counts: dict[str, int] = {}
    for t in read_header(Path(path), where).tensors.values():
        counts[t.qtype.name] = counts.get(t.qtype.name, 0) + 1
    return counts


def check_ensemble(path: str, local: Path | None, where: str) -> dict[str, int]:
    """The tensor types of the GGUF file a model with `quantization:` names, or a one-line
    ConfigError: not a GGUF file, nothing rounded in it, or a type without a known step."""
    fix = f"remove `quantization:` from {where.rsplit('.', 1)[0]}"
    f = Path(local) if local is not None else None
    if f is None or not f.is_file() or f.suffix != ".gguf":
        raise ConfigError(f"{where}: {path} is not a GGUF file; its weights carry no "
                          f"quantization step to draw within — {fix}")
    types = tensor_types(f, where)
    stepped = {t: n for t, n in types.items() if t in STEPPED}
    unknown = sorted(set(types) - set(STEPPED) - set(EXACT))
    if unknown:
        raise ConfigError(f"{where}: {path} holds {', '.join(unknown)} tensors, whose step "
                          f"tdos does not know (it knows {', '.join(STEPPED)}) — {fix}")
    if not stepped:
        raise ConfigError(f"{where}: {path} is not quantized (every tensor is "
                          f"{'/'.join(sorted(types))}) — {fix}")
    return types
