"""The zarr v3 store (docs/store.md; names and codes in analysis/schema.py): creation,
fingerprint check, ledger, writes, counts, and the upgrade of an older format.

The ledger (layer, seq, block) is the single record of completion. A block task writes its
own eigenvalue/delta chunks first and its ledger cell last, so a task killed mid-write
leaves the cell at 0 and is planned again; rewriting a chunk is idempotent.
"""
from __future__ import annotations

import json
import math
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import zarr

from analysis import schema
from analysis.schema import DONE, FLAGGED, PENDING, SCALE_ARRAYS, SHIFT_ARRAYS  # noqa: F401 (re-exported)
from sweep.config import SweepConfig, fingerprint, identity_dict
from sweep.errors import StoreMismatch
from sweep.provenance import checkpoint_record, software, verify_checkpoint


# ---------------------------------------------------------------- root

def open_root(cfg: SweepConfig, create: bool = True) -> zarr.Group:
    """Open the store for `cfg`, creating it when absent; refuses (reading only) a store
    made from another config, naming the differing fields."""
    p = Path(cfg.store)
    if (p / "zarr.json").is_file():
        root = zarr.open_group(str(p), mode="r+")
        check_same_config(dict(root.attrs), cfg)
        analysis = _jsonable(asdict(cfg.analysis))        # not identity: may change
        if root.attrs.get("analysis") != analysis:        # a reopened store stays untouched
            root.attrs["analysis"] = analysis
        return root
    if p.exists() and any(p.iterdir()):
        raise StoreMismatch(f"store: {p} exists and is not a tdos store — choose another path")
    if not create:
        raise StoreMismatch(f"store: {p} does not exist — run without --resume to start a new sweep")
    root = zarr.open_group(str(p), mode="a", zarr_format=3)
    # creation_id: a store deleted and made again at the same path is another store, even
    # from the same config (a text file's content can change behind its path)
    root.attrs.update({"tdos_format": schema.FORMAT, "creation_id": uuid.uuid4().hex,
                       "config": _jsonable(identity_dict(cfg)), "fingerprint": fingerprint(cfg),
                       "models": [m.name for m in cfg.models], "software": software(),
                       "analysis": _jsonable(asdict(cfg.analysis))})
    return root


def _check_format(attrs: Mapping, path) -> None:
    try:
        schema.check_format(attrs, path)
    except schema.StoreError as e:
        raise StoreMismatch(f"store: {e}") from None


def check_same_config(attrs: Mapping, cfg: SweepConfig) -> None:
    """Refuse root attributes `attrs` of a store in another format or from another config."""
    _check_format(attrs, cfg.store)
    if attrs.get("fingerprint") == fingerprint(cfg):
        return
    old = _flatten(attrs.get("config", {}))
    new = _flatten(_jsonable(identity_dict(cfg)))
    diffs = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(old.keys() | new.keys())
             if old.get(k) != new.get(k)]
    raise StoreMismatch(f"store: {cfg.store} was made from a different config ("
                        f"{'; '.join(diffs) or 'fingerprint differs'}) — use a new --store path "
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


def prepare_store(cfg: SweepConfig, create: bool = True) -> zarr.Group:
    """Open (or create) the store and every model group; tokens are fixed here, once.

    An existing group's checkpoint is checked against the files recorded at creation.
    """
    root = open_root(cfg, create=create)
    for m in cfg.models:
        if group_ready(root, m.name):
            verify_checkpoint(root[m.name].attrs["checkpoint"], f"{m.where}.path")
            continue
        from sweep.model import load_model
        from sweep.plan import make_tokens

        # the client loads each model once, for its identity (weights hash) and array shapes
        model = load_model(m.path, dtype=m.dtype, revision=m.revision)
        a_log = model.block(0).a_log()                       # (d_inner, d_state) or None
        create_group(root, m.name, identity=model.identity, checkpoint=checkpoint_record(model),
                     dtype=m.dtype, inputs=inputs_record(cfg), layer_lengths=m.layer_lengths,
                     token_block=cfg.token_block, tokens=make_tokens(m, cfg.inputs),
                     d_model=model.d_model,
                     a_log_shape=None if a_log is None else (model.n_layers, *a_log.shape))
    return root


def inputs_record(cfg: SweepConfig) -> dict:
    """Group attribute `inputs`: the inputs section, token_block, and which text was read
    (files, characters, sha256: sweep/inputs.py) when the tokens come from text."""
    i = cfg.inputs
    out = {"sequences": i.sequences, "length": i.length, "seed": i.seed, "text": i.text,
           "tokenizer": i.tokenizer, "token_block": cfg.token_block}
    return out if i.source is None else {**out, **_jsonable(i.source.record())}


# ---------------------------------------------------------------- model groups

def group_ready(root: zarr.Group, name: str) -> bool:
    return name in root and bool(root[name].attrs.get("complete"))


def create_group(root: zarr.Group, name: str, *, identity: dict, checkpoint: dict, dtype: str,
                 inputs: dict, layer_lengths, token_block: int, tokens: np.ndarray, d_model: int,
                 a_log_shape: tuple[int, int, int] | None) -> zarr.Group:
    """One model's arrays, empty (NaN, ledger 0); `complete` is set last, so a group left
    half-made by a crash is removed and made again."""
    if name in root:
        shutil.rmtree(Path(root.store.root) / name)
    g = root.create_group(name)
    rows = np.array([layer for layer, _ in layer_lengths], dtype=np.int64)      # (R,)
    lengths = np.array([n for _, n in layer_lengths], dtype=np.int64)           # (R,)
    S, L = tokens.shape
    R, nb = len(rows), math.ceil(L / token_block)
    d_inner, d_state = (None, None) if a_log_shape is None else a_log_shape[1:]
    sizes = {"layer": R, "seq": S, "token": L, "mode": d_model, "block": nb,
             "channel": d_inner, "state": d_state,
             "model_layer": None if a_log_shape is None else a_log_shape[0]}
    data = {"layer": rows, "layer_length": lengths, "tokens": tokens.astype(np.int64)}
    for array in schema.group_arrays(mamba=a_log_shape is not None):
        _create_array(g, array, dtype, sizes, token_block, data.get(array))
    g.attrs.update({"model": _jsonable({**identity, "dtype": dtype}), "checkpoint": checkpoint,
                    "inputs": inputs, "complete": True})
    return g


def _create_array(g: zarr.Group, name: str, dtype: str, sizes: dict, token_block: int,
                  data: np.ndarray | None) -> None:
    spec = schema.ARRAYS[name]
    shape = tuple(sizes[d] for d in spec.dims)
    if data is not None:                              # small index arrays: one chunk, written now
        a = g.create_array(name, shape=shape, chunks=shape, dtype=data.dtype,
                           dimension_names=spec.dims)
        a[...] = data
        return
    # a block task owns chunk (1, 1, token_block, ...) of each per-token array and the one
    # cell of each per-block array; a_log has one chunk per model layer
    chunks = ((1, 1, token_block) + shape[3:] if spec.per_token
              else (1,) * 3 if spec.dims[-1] == "block" else (1,) + shape[1:])
    np_dtype = schema.dtype_of(name, dtype)
    fill = 0 if spec.kind == "int8" else complex("nan+nanj") if spec.kind == "complex" else float("nan")
    a = g.create_array(name, shape=shape, chunks=chunks, dtype=np_dtype, fill_value=fill,
                       dimension_names=spec.dims)
    if name == "eig_backend":
        a.attrs["codes"] = list(schema.EIG_BACKENDS)


# ---------------------------------------------------------------- worker-side writes

def open_group(store: str, name: str, mode: str = "r+") -> zarr.Group:
    return zarr.open_group(str(store), path=name, mode=mode)


@dataclass
class BlockValues:
    """What one block task computed, rows t0..t0+T of the token axis."""

    eig: np.ndarray                          # (T, d) complex
    delta: np.ndarray | None = None          # (T, d_inner) Mamba, else None
    scale: tuple[np.ndarray, np.ndarray] | None = None   # ρ (T,), r (T,) along h_t
    shift: tuple[np.ndarray, np.ndarray] | None = None   # ρ (T,), r (T,) along 𝟙/√d
    eig_backend: str = "unknown"             # one of schema.EIG_BACKENDS


def write_block(g: zarr.Group | Mapping[str, zarr.Array], row: int, seq: int, block: int, t0: int,
                values: BlockValues) -> int:
    """Write one block's chunks, then its ledger cell; returns DONE or FLAGGED (non-finite).

    ρ, r do not enter the flag: a NaN there (h_t = 0) only means "no such mode found".
    """
    t1 = t0 + values.eig.shape[0]
    g["eigenvalues"][row, seq, t0:t1, :] = values.eig
    for names, pair in ((SCALE_ARRAYS, values.scale), (SHIFT_ARRAYS, values.shift)):
        for name, v in zip(names, pair or ()):
            g[name][row, seq, t0:t1] = v
    finite = bool(np.isfinite(values.eig).all())
    if values.delta is not None:
        g["delta"][row, seq, t0:t1, :] = values.delta
        finite = finite and bool(np.isfinite(values.delta).all())
    g["eig_backend"][row, seq, block] = schema.EIG_BACKENDS.index(values.eig_backend)
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


def record_worker_software(root: zarr.Group, name: str, seen: list[dict]) -> None:
    """Add the distinct worker software of this run (task results' "software") to the
    group's `worker_software` list; the client alone writes it, after its tasks."""
    g = root[name]
    known = list(g.attrs.get("worker_software", []))
    for s in seen:
        if s not in known:
            known.append(s)
    if len(known) > len(g.attrs.get("worker_software", [])):
        g.attrs["worker_software"] = known


# ---------------------------------------------------------------- counts

@dataclass(frozen=True)
class LedgerCounts:
    """Blocks of the planned part of the ledger, and A_log layers still missing."""

    total: int                 # planned blocks
    done: int                  # in the ledger (flagged included)
    flagged: int               # of which non-finite
    missing_a_log: int         # model layers whose A_log is not written (Mamba)

    @property
    def complete(self) -> bool:
        return self.done == self.total and self.missing_a_log == 0


def ledger_counts(root: zarr.Group, names) -> LedgerCounts:
    """LedgerCounts summed over the model groups `names`."""
    total = done = flagged = missing_a = 0
    for name in names:
        g = root[name]
        cells = g["ledger"][...][planned_mask(g)]
        total += cells.size
        done += int(np.count_nonzero(cells != PENDING))
        flagged += int(np.count_nonzero(cells == FLAGGED))
        missing_a += len(missing_a_log(g))
    return LedgerCounts(total, done, flagged, missing_a)


def status_rows(path: str) -> list[dict]:
    """Per model and layer: blocks done / flagged / total, tokens planned, dtype."""
    root = zarr.open_group(str(path), mode="r")
    _check_format(root.attrs, path)
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
