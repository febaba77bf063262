"""`tdos upgrade STORE`: rewrite an older store to the current format in place.

Every step keeps every value. Format 1 -> 2 adds what format 2 always has and format 1 may
lack: the scale_*/shift_* arrays (NaN: not computed, so the analysis classifies those
tokens' ζ ≈ 1 modes by value, as it did before), eig_backend (code 0, "unknown"), a
creation_id, and the checkpoint record (hashes only, from the recorded identity: sizes and
mtimes were never recorded, so a later run hashes the weights once to check them).
Format 2 -> 3 adds the layer kinds (formats 1 and 2 held Mamba-1, GPT-2, GPT-NeoX and
LLaMA only: every layer "mamba" or "attention"), the A_log shapes, jacobian_path (code 0,
"unknown") and the files' hashes under their format-3 name. Format 3 -> 4 adds the residual
stream arrays, empty: the next sweep of the store streams them. Format 4 -> 5 keeps a depth
group's Benettin QR exponents as `lyapunov_qr`, adds the stacks' singular-value exponents and
shift direction (NaN), and sets its walks pending: format 4 never stored the singular values
(the products were not kept), so `tdos sweep CONFIG --resume` walks the tokens up again.
Format 5 -> 6 rewrites a weight variant's attributes into the one `variant` = {kind, seed, of,
role} (sweep/format/variants.py), in the group's attributes and in its `model` identity: a
null's `null` {of, kind, seed} becomes role "null", a quantization member's `quantization`
{of, member, ensemble} kind "quantized", role "ensemble", seed its member, and its group
`<of>.quant.<k>` is renamed `<of>.quantized.<k>` (the group a plan now names).
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import zarr

from sweep.config.validate import existing_store
from sweep.errors import StoreMismatch
from sweep.format import schema
from sweep.format.ledger import PENDING
from sweep.format.variants import ATTR, Variant
from sweep.store.writer import add_array, group_ready


def upgrade(path) -> int:
    """Upgrade the store at `path` to schema.FORMAT; returns the format it had."""
    existing_store(path)
    root = zarr.open_group(str(path), mode="r+")
    fmt = root.attrs.get("tdos_format")
    if fmt == schema.FORMAT:
        return fmt
    if fmt not in schema.UPGRADABLE:
        raise StoreMismatch(f"store: {path} has tdos_format {fmt!r}; only formats "
                            f"{list(schema.UPGRADABLE)} upgrade to {schema.FORMAT}")
    names = list(root.attrs.get("models", []))
    renames = dict(root.attrs.get("upgrading") or {})    # left by an upgrade that stopped
    for name in names:
        here = name if name in root else renames.get(name, name)
        if group_ready(root, here):
            _upgrade_group(root[here])
            now = _as_variant(root[here], here)
            if now != here:
                renames[name] = now
    root.attrs["upgrading"] = renames                    # first: what is renamed, then the dirs
    for old, new in renames.items():
        if old in root and new not in root:
            os.rename(Path(root.store.root) / old, Path(root.store.root) / new)
    # last: a crash midway leaves a store of its old format that upgrades again
    root.attrs.update({"tdos_format": schema.FORMAT, "creation_id": uuid.uuid4().hex,
                       "upgraded_from": fmt, "models": [renames.get(n, n) for n in names]})
    del root.attrs["upgrading"]
    return fmt


def _upgrade_group(g: zarr.Group) -> None:
    R, S, L, d = g["eigenvalues"].shape
    mamba = "a_log" in g
    sizes = {"layer": R, "seq": S, "token": L, "mode": d, "hidden": d, "block": g["ledger"].shape[2]}
    if mamba:
        sizes.update(zip(("model_layer", "channel", "state"), g["a_log"].shape))
    dtype = g.attrs["model"]["dtype"]
    B = g.attrs["inputs"]["token_block"]
    for name in schema.group_arrays(mamba):
        if name not in g:
            add_array(g, name, dtype, sizes, B, None)
    if g.attrs.get("depth") and "lyapunov_qr" not in g:
        _upgrade_depth(g, sizes, dtype, B)
    model = dict(g.attrs["model"])
    hashes = model.get("files_sha256") or model.get("weights_sha256", {})
    if "checkpoint" not in g.attrs:
        g.attrs["checkpoint"] = {"dir": None,
                                 "files": {f: {"sha256": h} for f, h in hashes.items()}}
    if "layer_kinds" not in g.attrs:
        n = model.get("config", {}).get("num_hidden_layers") or (g["a_log"].shape[0] if mamba
                                                                else int(g["layer"][...].max()) + 1)
        shape = list(g["a_log"].shape[1:]) if mamba else None
        g.attrs.update({"layer_kinds": ["mamba" if mamba else "attention"] * n,
                        "a_log_shapes": [shape] * n})
    g.attrs["model"] = {**model, "files_sha256": hashes}


def _upgrade_depth(g: zarr.Group, sizes: dict, dtype: str, B: int) -> None:
    """Format 4 -> 5 of a group swept with `depth:` (module docstring)."""
    sizes = {**sizes, "span": g["stack_gain"].shape[0]}
    for name in schema.STACK_ARRAYS_5:
        add_array(g, name, dtype, sizes, B, None)
    g["lyapunov_qr"][...] = g["lyapunov"][...]
    g["lyapunov"][...] = float("nan")
    g["depth_ledger"][...] = PENDING


def _as_variant(g: zarr.Group, name: str) -> str:
    """Format 5 -> 6 of group `g` (module docstring): its variant's attributes rewritten into
    `variant`; returns the name its group has in format 6."""
    attrs = dict(g.attrs)
    if attrs.get("null"):
        n = attrs["null"]
        v = Variant(str(n["kind"]), int(n["seed"]), str(n["of"]), "null")
    elif attrs.get("quantization") and "of" in attrs["quantization"]:
        q = attrs["quantization"]
        v = Variant("quantized", int(q["member"]), str(q["of"]), "ensemble")
    else:
        v = Variant.from_attrs(attrs)                    # format 6 already, or a trained model
        return name if v is None else v.group
    model = {k: x for k, x in attrs.get("model", {}).items() if k not in ("null", "quantization")}
    g.attrs.update({ATTR: v.attrs(), "model": {**model, ATTR: v.attrs()}})
    for old in ("null", "quantization"):
        if old in g.attrs:
            del g.attrs[old]
    return v.group
