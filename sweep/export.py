"""`tdos export-null STORE NULL_MODEL OUT`: one null model of a store as an ordinary
`save_pretrained` checkpoint (docs/nulls.md), for inspection and for independent checks.

The null's weights are made by the whole-model route of the workers (its kind's registered
maker, sweep/checkpoints/makers.py `Maker.whole`) from the checkpoint the store recorded,
checked unchanged first; the
tokenizer is saved beside them when the checkpoint ships one. Swept as an ordinary model
in the same dtype, the export gives the null's stored eigenvalues exactly.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import zarr

from sweep.errors import ConfigError
from sweep.format import dtypes, schema, variants
from sweep.plan.provenance import verify_checkpoint

# the whole model in its compute dtype, once loaded and once made again as the null
# (a variant's maker builds fresh tensors before the loaded ones are freed)
COPIES = 2


def export_null(store: str, name: str, out: str) -> Path:
    """Write null model `name` of `store` to directory `out`; returns it."""
    root = _open(store)
    models = list(root.attrs.get("models", []))
    if name not in models:
        raise ConfigError(f"NULL_MODEL: {name!r} is not a model of {store} (models: "
                          f"{', '.join(models)}) — give one of its null models")
    g = root[name]
    found = variants.variants(root)
    null = found.get(name)
    if null is None or null.role != "null":
        what = f"an {variants.NOUNS[null.role]}" if null is not None else "a trained model"
        nulls = [m for m, v in found.items() if v.role == "null"]
        raise ConfigError(f"NULL_MODEL: {name!r} of {store} is {what}, not a null — "
                          f"give one of {', '.join(nulls) or 'none'}")
    dest = Path(out)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ConfigError(f"OUT: {dest} exists and is not an empty directory — give a new path")
    record, dtype = g.attrs["checkpoint"], g.attrs["model"]["dtype"]
    verify_checkpoint(record, "NULL_MODEL")
    _check_memory(record, dtype)
    from sweep.checkpoints import hf, kinds
    from sweep.checkpoints.formats import open_checkpoint
    from sweep.plan.layers import decoder_layers
    from sweep.worker.model import load_local

    model = load_local(Path(record["dir"]), dtype, "cpu", name=g.attrs["model"]["path"])
    kinds.maker(null).whole(model.hf, open_checkpoint(Path(record["dir"])), decoder_layers(model.hf))
    hf.drop_gguf_quantizer(model.hf)      # a GGUF's model: its tensors are plain ones by now
    model.hf.save_pretrained(dest)
    tok = model.tokenizer()
    if tok is not None:
        tok.save_pretrained(dest)
    return dest


def _open(store: str) -> zarr.Group:
    p = Path(store)
    if not (p / "zarr.json").is_file():
        raise ConfigError(f"STORE: {store} is not a tdos store — give the store a sweep wrote")
    root = zarr.open_group(str(p), mode="r")
    try:
        schema.check_format(dict(root.attrs), store)
    except schema.StoreError as e:
        raise ConfigError(f"STORE: {e}") from None
    return root


def weight_bytes(record: dict, dtype: str) -> int:
    """Bytes of one copy of the recorded checkpoint's weights in `dtype`: a GGUF's tensors as
    dequantized (their entries counted from its tensor table: a Q4 file is a fraction of them),
    a folder's weight files taken as float32 cast to `dtype`."""
    if str(record["dir"]).endswith(".gguf"):
        from sweep.checkpoints import hf

        _, entries, _ = hf.gguf_table(record["dir"])     # (name, shape, type, offset)
        return sum(math.prod(shape) for _, shape, *_ in entries) * dtypes.row(dtype).bytes
    stored = sum(int(r.get("size", 0)) for f, r in record["files"].items()
                 if f.endswith((".safetensors", ".bin")))
    return stored * dtypes.row(dtype).bytes // dtypes.row("float32").bytes


def _check_memory(record: dict, dtype: str) -> None:
    """Refuse, in one line, a model whose copies would not fit in this machine's memory."""
    need = COPIES * weight_bytes(record, dtype)
    have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > have:
        raise ConfigError(f"NULL_MODEL: exporting needs about {need / 2**30:.1f} GiB ({COPIES} copies "
                          f"of the weights in {dtype}), this machine has {have / 2**30:.1f} GiB — "
                          f"export on a larger machine")
