"""The zarr v3 store (layout in ARCHITECTURE.md): creation, fingerprint check, ledger, writes.

The ledger (layer, seq, block) is the single record of completion. A block task writes its
own eigenvalue/delta chunks first and its ledger cell last, so a task killed mid-write
leaves the cell at 0 and is planned again; rewriting a chunk is idempotent.
"""
from __future__ import annotations

import json
import math
import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import zarr

from sweep.config import SweepConfig, fingerprint, identity_dict

FORMAT = 1
PENDING, DONE, FLAGGED = 0, 1, 2
_COMPLEX = {"float32": "complex64", "float64": "complex128"}
# (layer, seq, token) Rayleigh quotient ρ_t and relative residual r_t of J_tt along h_t
SCALE_ARRAYS = ("scale_rayleigh", "scale_residual")
# the same along u = 𝟙/√d, LayerNorm's shift direction (computed for every architecture)
SHIFT_ARRAYS = ("shift_rayleigh", "shift_residual")


class StoreMismatch(Exception):
    """The store at the given path was made from another config (or is not a tdos store)."""


# ---------------------------------------------------------------- root

def open_root(cfg: SweepConfig, create: bool = True) -> zarr.Group:
    """Open the store for `cfg`, creating it when absent; refuses (reading only) a store
    made from another config, naming the differing fields."""
    p = Path(cfg.store)
    if (p / "zarr.json").is_file():
        root = zarr.open_group(str(p), mode="r+")
        _check_same_config(root, cfg)
        return root
    if p.exists() and any(p.iterdir()):
        raise StoreMismatch(f"store: {p} exists and is not a tdos store; choose another path")
    if not create:
        raise StoreMismatch(f"store: {p} does not exist; run without --resume to start a new sweep")
    root = zarr.open_group(str(p), mode="a", zarr_format=3)
    root.attrs.update({"tdos_format": FORMAT, "config": _jsonable(identity_dict(cfg)),
                       "fingerprint": fingerprint(cfg), "models": [m.name for m in cfg.models]})
    return root


def _check_same_config(root: zarr.Group, cfg: SweepConfig) -> None:
    attrs = dict(root.attrs)
    if attrs.get("tdos_format") != FORMAT:
        raise StoreMismatch(f"store: {cfg.store} is not a tdos store (tdos_format "
                            f"{attrs.get('tdos_format')!r}); choose another path")
    if attrs.get("fingerprint") == fingerprint(cfg):
        return
    old = _flatten(attrs.get("config", {}))
    new = _flatten(_jsonable(identity_dict(cfg)))
    diffs = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(old.keys() | new.keys())
             if old.get(k) != new.get(k)]
    raise StoreMismatch(f"store: {cfg.store} was made from a different config ("
                        f"{'; '.join(diffs) or 'fingerprint differs'}); use a new --store path "
                        f"or the original config")


def _flatten(d, prefix: str = "") -> dict:
    if isinstance(d, dict):
        out = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(d, list) and d and all(isinstance(v, dict) for v in d):
        out = {}
        for i, v in enumerate(d):
            out.update(_flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: d}


def _jsonable(d):
    return json.loads(json.dumps(d, default=str))


# ---------------------------------------------------------------- model groups

def group_ready(root: zarr.Group, name: str) -> bool:
    return name in root and bool(root[name].attrs.get("complete"))


def create_group(root: zarr.Group, name: str, *, identity: dict, dtype: str, inputs: dict,
                 layer_lengths, token_block: int, tokens: np.ndarray, d_model: int,
                 a_log_shape: tuple[int, int, int] | None) -> zarr.Group:
    """One model's arrays, empty (NaN, ledger 0); `complete` is set last, so a group left
    half-made by a crash is removed and made again."""
    if name in root:
        shutil.rmtree(Path(root.store.root) / name)
    g = root.create_group(name)
    rows = np.array([layer for layer, _ in layer_lengths], dtype=np.int64)      # (R,)
    lengths = np.array([n for _, n in layer_lengths], dtype=np.int64)           # (R,)
    S, L = tokens.shape
    R, B, nb = len(rows), token_block, math.ceil(L / token_block)
    _array(g, "layer", rows, ("layer",))
    _array(g, "layer_length", lengths, ("layer",))
    _array(g, "tokens", tokens.astype(np.int64), ("seq", "token"))
    nan = float("nan")
    g.create_array("eigenvalues", shape=(R, S, L, d_model), chunks=(1, 1, B, d_model),
                   dtype=_COMPLEX[dtype], fill_value=complex(nan, nan),
                   dimension_names=("layer", "seq", "token", "mode"))
    for scale in SCALE_ARRAYS + SHIFT_ARRAYS:
        g.create_array(scale, shape=(R, S, L), chunks=(1, 1, B), dtype=dtype, fill_value=nan,
                       dimension_names=("layer", "seq", "token"))
    g.create_array("ledger", shape=(R, S, nb), chunks=(1, 1, 1), dtype="int8", fill_value=0,
                   dimension_names=("layer", "seq", "block"))
    if a_log_shape is not None:
        n_layers, d_inner, d_state = a_log_shape
        g.create_array("delta", shape=(R, S, L, d_inner), chunks=(1, 1, B, d_inner), dtype=dtype,
                       fill_value=nan, dimension_names=("layer", "seq", "token", "channel"))
        g.create_array("a_log", shape=a_log_shape, chunks=(1, d_inner, d_state), dtype=dtype,
                       fill_value=nan, dimension_names=("model_layer", "channel", "state"))
    g.attrs.update({"model": _jsonable({**identity, "dtype": dtype}), "inputs": inputs,
                    "complete": True})
    return g


def _array(g: zarr.Group, name: str, data: np.ndarray, dims: tuple[str, ...]) -> None:
    a = g.create_array(name, shape=data.shape, chunks=data.shape, dtype=data.dtype,
                       dimension_names=dims)
    a[...] = data


# ---------------------------------------------------------------- worker-side writes

def open_group(store: str, name: str, mode: str = "r+") -> zarr.Group:
    return zarr.open_group(str(store), path=name, mode=mode)


def write_block(g: zarr.Group | Mapping[str, zarr.Array], row: int, seq: int, block: int, t0: int,
                eig: np.ndarray, delta: np.ndarray | None,
                scale: tuple[np.ndarray, np.ndarray] | None = None,
                shift: tuple[np.ndarray, np.ndarray] | None = None) -> int:
    """Write one block's chunks, then its ledger cell; returns DONE or FLAGGED (non-finite).

    eig (T, d) complex; delta (T, d_inner) or None; scale = (ρ (T,), r (T,)) along h_t or
    None; shift = the same along 𝟙/√d or None; rows t0..t0+T of the token axis. A group made
    before the scale (or shift) arrays existed (a resumed older store) keeps its layout: those
    values are then not written, and the analysis falls back to classifying ζ ≈ 1 by value.
    """
    t1 = t0 + eig.shape[0]
    g["eigenvalues"][row, seq, t0:t1, :] = eig
    # ρ, r do not enter the flag: a NaN there (h_t = 0) only means "no scale mode found"
    for names, pair in ((SCALE_ARRAYS, scale), (SHIFT_ARRAYS, shift)):
        if pair is not None and names[0] in g:
            for name, values in zip(names, pair):
                g[name][row, seq, t0:t1] = values
    finite = bool(np.isfinite(eig).all())
    if delta is not None:
        g["delta"][row, seq, t0:t1, :] = delta
        finite = finite and bool(np.isfinite(delta).all())
    status = DONE if finite else FLAGGED
    g["ledger"][row, seq, block] = status
    return status


def write_a_log(g: zarr.Group | Mapping[str, zarr.Array], layer: int, a_log: np.ndarray) -> None:
    """a_log (d_inner, d_state) of model layer `layer`."""
    g["a_log"][layer] = a_log


def missing_a_log(g: zarr.Group) -> list[int]:
    """Model layers whose A_log is not written yet (all NaN); [] for non-Mamba groups."""
    if "a_log" not in g:
        return []
    a = g["a_log"][...]                                   # (n_layers, d_inner, d_state)
    return [i for i in range(a.shape[0]) if np.isnan(a[i]).all()]


def planned_mask(g: zarr.Group) -> np.ndarray:
    """(R, S, nb) bool: ledger cells that hold a planned block (within layer_length)."""
    R, S, nb = g["ledger"].shape
    B = g.attrs["inputs"]["token_block"]
    n_blocks = -(-g["layer_length"][...] // B)            # (R,) ceil
    mask = np.arange(nb)[None, :] < n_blocks[:, None]     # (R, nb)
    return np.broadcast_to(mask[:, None, :], (R, S, nb))


# ---------------------------------------------------------------- status

def status_rows(path: str) -> list[dict]:
    """Per model and layer: blocks done / flagged / total, tokens planned, dtype."""
    root = zarr.open_group(str(path), mode="r")
    if root.attrs.get("tdos_format") != FORMAT:
        raise StoreMismatch(f"store: {path} is not a tdos store; give the path of a sweep's store")
    rows = []
    for name in root.attrs.get("models", []):
        if not group_ready(root, name):
            rows.append({"model": name, "layer": None, "done": 0, "flagged": 0, "total": None,
                         "tokens": None, "dtype": None})
            continue
        g = root[name]
        ledger, mask = g["ledger"][...], planned_mask(g)
        for r, (layer, n) in enumerate(zip(g["layer"][...], g["layer_length"][...])):
            cells = ledger[r][mask[r]]
            rows.append({"model": name, "layer": int(layer), "done": int((cells == DONE).sum()),
                         "flagged": int((cells == FLAGGED).sum()), "total": int(cells.size),
                         "tokens": int(n), "dtype": g.attrs["model"]["dtype"]})
    return rows
