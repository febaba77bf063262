"""The zarr v3 store (docs/store.md; names and codes in sweep/format/schema.py): creation from the
plan, the config/checkpoint check of an existing store, and the workers' writes.

A block task writes its own chunks first and its ledger cell last (sweep/store/ledger.py reads
it), so a task killed mid-write leaves the cell at 0 and is planned again; rewriting a
chunk is idempotent.
"""
from __future__ import annotations

import json
import math
import shutil
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zarr

from sweep.errors import StoreMismatch
from sweep.format import schema
from sweep.format.ledger import DONE, PENDING, code_for
from sweep.format import variants
from sweep.format.schema import SCALE_ARRAYS, SHIFT_ARRAYS
from sweep.format.variants import Variant
from sweep.plan.make import ModelPlan, Plan
from sweep.plan.provenance import software, verify_checkpoint
from sweep.store import grow

# ---------------------------------------------------------------- root

def open_store(plan: Plan, create: bool = True, say=None) -> zarr.Group:
    """The store of `plan` with every model group made: created when absent, grown when the
    config adds layers, sequences, models or spans (sweep/store/grow.py; `say` gets the line
    that says what), refused (read only) when the config changes what a stored block is or
    when a checkpoint's files changed."""
    root = _open_root(plan, create)
    for m in plan.models:
        if group_ready(root, m.name):
            verify_checkpoint(root[m.name].attrs["checkpoint"], f"{m.spec.where}.path")
            _check_kinds(root[m.name], m, plan.store)
            grow.finish_growing(root[m.name], m)       # a growth a stopped sweep left half done
    made = any(group_ready(root, n) for n in root.attrs.get("models", []))
    growth = grow.Growth.of(root, plan) if made else None        # None: a store being created
    if growth is not None and growth.added and say is not None:
        say(growth.describe())
    for m, gg in zip(plan.models, growth.groups if growth else ()):
        if group_ready(root, m.name) and gg.added:
            grow.grow_group(root[m.name], m, gg)
    for m in plan.models:
        if not group_ready(root, m.name):
            create_model_group(root, m, plan.token_block)
        if plan.config.memory is not None:
            add_memory(root[m.name], plan.config.memory.record(), plan.store,
                       [k.conv_width for k in m.info.kinds])
    if growth is not None and growth.added and root.attrs.get("fingerprint") != plan.fingerprint:
        grow.record(root, plan, growth, _jsonable(plan.identity))
    return root


def _check_kinds(g: zarr.Group, m: ModelPlan, store: str) -> None:
    """Refuse a group whose layers an older tdos named otherwise: its arrays lack what this
    one writes (a gated delta rule swept as `recurrent` has no Δ_t or A_log)."""
    have, want = list(g.attrs.get("layer_kinds") or []), [k.kind for k in m.info.kinds]
    if have and have != want:
        diffs = "; ".join(f"layer {i}: {a} -> {b}" for i, (a, b) in enumerate(zip(have, want))
                          if a != b)
        raise StoreMismatch(f"store: {store} holds model {m.name!r} swept when its layers were "
                            f"named otherwise ({diffs}): this tdos stores more for them — sweep "
                            f"into a new --store path")


def add_memory(g: zarr.Group, record: dict, store: str, conv_widths: list | None = None) -> None:
    """The memory arrays of group `g` for settings `record` (MemoryConfig.record()): made
    when the group has none (a finished sweep's store too: only they are then computed);
    refused when the group holds memory of other settings. The attribute is set last.

    `conv_widths` (one per model layer, 0 without a causal convolution) is what the memory
    fits' default window starts past; recorded beside the settings, not part of them (it is
    the architecture's, so a store from before it was recorded takes it on --resume)."""
    if conv_widths is not None and "conv_widths" not in g.attrs:
        g.attrs["conv_widths"] = [int(w) for w in conv_widths]
    have = g.attrs.get("memory")
    if have is not None and _more_lags(have, record):
        _grow_lags(g, record)
        return
    if have is not None:
        if have != record:
            diffs = "; ".join(f"memory.{k}: {have.get(k)!r} -> {record[k]!r}" for k in record
                              if have.get(k) != record[k])
            raise StoreMismatch(f"store: {store} holds token memory of model {g.basename!r} swept "
                                f"with other settings ({diffs}) — keep its settings or sweep into a "
                                f"new --store path")
        return
    R, S, L = g["eigenvalues"].shape[:3]
    sizes = {"layer": R, "seq": S, "token": L, "lag": record["lags"] + 1}
    for name in schema.group_arrays(ssm=True, depth=True, memory=True):
        if schema.ARRAYS[name].memory and name not in g:
            add_array(g, name, g.attrs["model"]["dtype"], sizes, 1, None)
    g.attrs["memory"] = record


def _more_lags(have: dict, record: dict) -> bool:
    """Whether `record` asks for more lags than the group holds, all else the same."""
    return (record["lags"] > have["lags"]
            and {k: v for k, v in have.items() if k != "lags"} == {k: v for k, v in record.items() if k != "lags"})


def _grow_lags(g: zarr.Group, record: dict) -> None:
    """More lags: the lag axis grows and every profile is computed again (one call gives every
    lag of a (row, sequence)); the settings are recorded last."""
    for name in ("memory", "memory_stderr"):
        g[name].resize(g[name].shape[:3] + (record["lags"] + 1,))
    g["memory_ledger"][...] = PENDING
    g.attrs["memory"] = record


def _open_root(plan: Plan, create: bool) -> zarr.Group:
    p = Path(plan.store)
    # not identity: may change; `skip_positions: auto` recorded as "auto", never as its number
    analysis = _jsonable(plan.config.analysis.to_dict())
    if (p / "zarr.json").is_file():
        root = zarr.open_group(str(p), mode="r+")
        check_same_config(dict(root.attrs), plan)
        if root.attrs.get("analysis") != analysis:          # a reopened store stays untouched
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
                       "config": _jsonable(plan.identity), "fingerprint": plan.fingerprint,
                       "models": [m.name for m in plan.models], "software": software(),
                       "analysis": analysis,
                       "history": [{"date": time.strftime("%Y-%m-%d %H:%M:%S"), "added": "created",
                                    "fingerprint": plan.fingerprint}]})
    return root


def check_same_config(attrs: Mapping, plan: Plan) -> None:
    """Refuse root attributes `attrs` of a store in another format or from another config."""
    try:
        schema.check_format(attrs, plan.store)
    except schema.StoreError as e:
        raise StoreMismatch(f"store: {e}") from None
    if attrs.get("fingerprint") == plan.fingerprint:
        return
    diffs = grow.refused_changes(attrs.get("config", {}), _jsonable(plan.identity))
    if not diffs:                   # only the extent differs: the store grows (or is shown in part)
        return
    if all(d.startswith("depth.") for d in diffs):
        raise StoreMismatch(f"store: {plan.store} was swept with other depth settings ("
                            f"{'; '.join(diffs)}); the stacks need every J_tt formed again, "
                            f"walking each token block up the layers, so they cannot be added to "
                            f"its blocks — sweep into a new --store path")
    raise StoreMismatch(f"store: {plan.store} was made from a different config ("
                        f"{'; '.join(diffs)}) — use a new --store path or the original config")


def _jsonable(d):
    return json.loads(json.dumps(d, default=str))


# ---------------------------------------------------------------- model groups

def group_ready(root: zarr.Group, name: str) -> bool:
    return name in root and bool(root[name].attrs.get("complete"))


def create_model_group(root: zarr.Group, m: ModelPlan, token_block: int) -> zarr.Group:
    """The group of planned model `m`."""
    info = m.info
    identity = grow.group_identity(m)
    return create_group(root, m.name, identity=identity, checkpoint=m.checkpoint,
                        dtype=m.spec.dtype, inputs=_jsonable(m.inputs), layer_lengths=m.rows,
                        token_block=token_block, tokens=m.tokens, d_model=info.d_model,
                        layer_kinds=[k.kind for k in info.kinds],
                        a_log_shapes=[list(k.a_log_shape) or None for k in info.kinds],
                        delta_channels=[k.delta_channels for k in info.kinds], depth=m.depth,
                        variant=m.variant)


def create_group(root: zarr.Group, name: str, *, identity: dict, checkpoint: dict, dtype: str,
                 inputs: dict, layer_lengths, token_block: int, tokens: np.ndarray, d_model: int,
                 layer_kinds: list[str], a_log_shapes: list | None = None,
                 delta_channels: list[int] | None = None, depth: dict | None = None,
                 variant: Variant | None = None) -> zarr.Group:
    """One model's arrays, empty (NaN, ledger 0), in the layout sweep/format/schema.py declares;
    `complete` is set last, so a group left half-made by a crash is removed and made again.

    `layer_kinds` has one kind per model layer; `a_log_shapes` A_log's shape per model layer
    ([d_inner, d_state] Mamba-1, [heads] Mamba-2 and the delta rule, None elsewhere);
    `delta_channels` Δ_t's width per model layer (default: A_log's first axis); `depth`
    ({"spans", "layers": [l0, l1]}, or None) adds the stack arrays; `variant` (or None) marks
    a weight variant of a trained model of the store, a null or an ensemble member
    (sweep/format/variants.py: its group attribute `variant`, read by `Variant.from_attrs`).
    The tests write stores of known content through this same function."""
    if name in root:
        shutil.rmtree(Path(root.store.root) / name)
    g = root.create_group(name)
    a_log_shapes = list(a_log_shapes or [None] * len(layer_kinds))
    shapes = [tuple(s) for s in a_log_shapes if s]
    if delta_channels is None:
        delta_channels = [s[0] if s else 0 for s in a_log_shapes]
    channels = max([s[0] for s in shapes] + list(delta_channels), default=0)
    state = max((s[1] if len(s) == 2 else 1 for s in shapes), default=0)
    S, L = tokens.shape
    sizes = {"layer": len(layer_lengths), "seq": S, "token": L, "mode": d_model,
             "block": math.ceil(L / token_block), "channel": channels or None,
             "state": state or None, "model_layer": len(layer_kinds), "hidden": d_model,
             "span": len(depth["spans"]) if depth else None}
    data = {"layer": np.array([layer for layer, _ in layer_lengths], dtype=np.int64),
            "layer_length": np.array([n for _, n in layer_lengths], dtype=np.int64),
            "tokens": tokens.astype(np.int64)}
    for array in schema.group_arrays(ssm=bool(shapes), depth=depth is not None):
        add_array(g, array, dtype, sizes, token_block, data.get(array))
    if depth is not None:
        g.attrs["depth"] = {"spans": [int(s) for s in depth["spans"]],
                            "layers": [int(x) for x in depth["layers"]]}
    g.attrs.update({"model": _jsonable({**identity, "dtype": dtype}), "checkpoint": checkpoint,
                    "inputs": {**inputs, "token_block": token_block},
                    "layer_kinds": list(layer_kinds), "a_log_shapes": a_log_shapes,
                    "delta_channels": [int(c) for c in delta_channels],
                    **({variants.ATTR: variant.attrs()} if variant is not None else {}),
                    "complete": True})
    return g


def add_array(g: zarr.Group, name: str, dtype: str, sizes: dict, token_block: int,
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
    if spec.depth:                                    # a walk owns its token block's chunks
        chunks = tuple(token_block if d == "token" else n if d == "mode" else 1
                       for d, n in zip(spec.dims, shape))
    else:
        chunks = ((1, 1, token_block) + shape[3:] if spec.per_token
                  else (1, 1) + shape[2:] if spec.per_sequence
                  else (1,) * 3 if spec.dims[-1] == "block" else (1,) + shape[1:])
    np_dtype = schema.dtype_of(name, dtype)
    fill = 0 if spec.kind == "int8" else complex("nan+nanj") if spec.kind == "complex" else float("nan")
    a = g.create_array(name, shape=shape, chunks=chunks, dtype=np_dtype, fill_value=fill,
                       dimension_names=spec.dims)
    codes = {"eig_backend": schema.EIG_BACKENDS, "jacobian_path": schema.JACOBIAN_PATHS}
    if name in codes:
        a.attrs["codes"] = list(codes[name])


# ---------------------------------------------------------------- worker-side writes

def open_group(store: str, name: str, mode: str = "r+") -> zarr.Group:
    return zarr.open_group(str(store), path=name, mode=mode)


@dataclass
class BlockValues:
    """What one block task computed, rows t0..t0+T of the token axis."""

    eig: np.ndarray                          # (T, d) complex
    delta: np.ndarray | None = None          # (T, channels) layers with a decay, else None
    scale: tuple[np.ndarray, np.ndarray] | None = None   # ρ (T,), r (T,) along h_t
    shift: tuple[np.ndarray, np.ndarray] | None = None   # ρ (T,), r (T,) along 𝟙/√d
    frobenius2: np.ndarray | None = None     # (T,) ‖J_tt‖_F²
    nonnormality: np.ndarray | None = None   # (T,) Henrici's departure (sweep.numerics.spectra.henrici)
    eig_backend: str = "unknown"             # one of schema.EIG_BACKENDS
    jacobian_path: str = "unknown"           # one of schema.JACOBIAN_PATHS


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
    for name in ("frobenius2", "nonnormality"):
        if getattr(values, name) is not None:
            g[name][row, seq, t0:t1] = getattr(values, name)
    finite = bool(np.isfinite(values.eig).all())
    if values.delta is not None:
        c = values.delta.shape[1]
        g["delta"][row, seq, t0:t1, :c] = values.delta
        finite = finite and bool(np.isfinite(values.delta).all())
    g["eig_backend"][row, seq, block] = schema.EIG_BACKENDS.index(values.eig_backend)
    g["jacobian_path"][row, seq, block] = schema.JACOBIAN_PATHS.index(values.jacobian_path)
    status = code_for(finite)
    g["ledger"][row, seq, block] = status
    return status


def write_residual(g: zarr.Group | Mapping[str, zarr.Array], row: int, seq: int, h: np.ndarray) -> None:
    """h (n, d) entering the layer of `row` for sequence `seq`, then its ledger cell."""
    g["residual"][row, seq, : h.shape[0]] = h
    g["residual_ledger"][row, seq] = DONE


@dataclass
class StackValues:
    """What the store keeps of one stack P_t (T tokens): eig (T, d), ‖P_t‖_F²/d (T,),
    (1/s) ln σ_i (T, d), and ρ, r (T,) along 𝟙/√d."""
    eig: np.ndarray
    gain: np.ndarray
    lyapunov: np.ndarray
    shift: tuple


def write_stack(g: zarr.Group | Mapping[str, zarr.Array], span: int, row: int, seq: int, t0: int,
                v: StackValues) -> None:
    """One stack's values, of span index `span` starting at `row`."""
    t1 = t0 + v.eig.shape[0]
    g["stack_eigenvalues"][span, row, seq, t0:t1] = v.eig
    g["stack_gain"][span, row, seq, t0:t1] = v.gain
    g["stack_lyapunov"][span, row, seq, t0:t1] = v.lyapunov
    g["stack_shift_rayleigh"][span, row, seq, t0:t1] = v.shift[0]
    g["stack_shift_residual"][span, row, seq, t0:t1] = v.shift[1]


def write_lyapunov(g: zarr.Group | Mapping[str, zarr.Array], seq: int, block: int, t0: int,
                   gamma: np.ndarray, gamma_qr: np.ndarray) -> None:
    """The run's Lyapunov exponents (T, d) of tokens t0.. (singular values; QR diagnostic),
    then the walk's ledger cell."""
    g["lyapunov"][seq, t0:t0 + gamma.shape[0]] = gamma
    g["lyapunov_qr"][seq, t0:t0 + gamma.shape[0]] = gamma_qr
    g["depth_ledger"][seq, block] = DONE


def write_memory(g: zarr.Group | Mapping[str, zarr.Array], row: int, seq: int, ts, m: np.ndarray,
                 stderr: np.ndarray) -> None:
    """m_t(k) and its standard error (len(ts), lags+1) at output tokens `ts` of (row, seq),
    then its memory_ledger cell."""
    L, lags = g["memory"].shape[2:]
    full = np.full((L, lags), np.nan)
    err = full.copy()
    full[list(ts)], err[list(ts)] = m, stderr
    g["memory"][row, seq] = full
    g["memory_stderr"][row, seq] = err
    g["memory_ledger"][row, seq] = DONE


def write_a_log(g: zarr.Group | Mapping[str, zarr.Array], layer: int, a_log: np.ndarray) -> None:
    """A_log of model layer `layer`: (d_inner, d_state) Mamba-1, (heads,) Mamba-2 and the
    gated delta rule."""
    a = np.asarray(a_log)
    a = a[:, None] if a.ndim == 1 else a                   # (channels, state)
    g["a_log"][layer, : a.shape[0], : a.shape[1]] = a


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
