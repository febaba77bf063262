"""The model a worker holds for a task: layer-local (sweep/worker/resident.py) where the task's
ModelRef says so, else the whole model; one model per worker, the first block of each checked
(sweep/worker/check.py).

The whole model is keyed by the checkpoint's identity (the files' sha256 recorded at store
creation), and used only while its files are unchanged on disk since it was loaded (a few
stat calls per task).
"""
from __future__ import annotations

import ctypes
import gc
from dataclasses import dataclass
from pathlib import Path

import torch

from sweep.errors import CheckpointChanged
from sweep.plan import provenance
from sweep.tasks import ModelRef
from sweep.worker import check


@dataclass
class Whole:
    key: tuple             # what decides its content (_whole)
    model: object          # sweep.worker.model.LoadedModel
    files: tuple           # provenance.file_state of its recorded files right after loading
    checked: bool = False  # the self-check (causality, J_tt) passed on this worker


def model(state, ref: ModelRef, layer: int | None = None, seq: int | None = None):
    """The worker's copy of the model: layer-local where ref.local, else the whole model; with
    `layer`, the first call runs the self-check on that layer (for a layer-local model on
    sequence `seq`'s stored h_l)."""
    where = device(ref)
    if not ref.local:
        if state.resident.drop():                 # one model per worker: the other route's goes
            release_memory()
        return _whole(state, ref, where, layer)
    if state.whole is not None:
        state.whole = None
        release_memory()
    cached = state.resident.model(ref, where)     # built (or refused) by route.routed first
    if layer is not None and not cached.checked:
        check.local(state.arrays(ref), cached, layer, seq, ref)
        cached.checked = True
    return cached


def device(ref: ModelRef) -> str:
    if ref.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return ref.device


def _whole(state, ref: ModelRef, device: str, layer: int | None = None):
    """The worker's copy of the whole model, loaded on first use; one model per worker at a time.

    A store of another checkpoint behind the same path gets a fresh load, and a load whose
    files differ from the record (the checkpoint or its config.json overwritten since the
    store was made) raises CheckpointChanged. A held model whose files changed on disk since
    it was loaded is loaded again. With `layer`, the first call runs the self-check on that
    layer.

    Tasks come model by model (tasks.py), so dropping the previous model costs at most a
    reload at a model boundary, while keeping it would hold two copies of the weights on
    every worker of a sweep with an fp64 rerun.
    """
    key = (ref.location, ref.dtype, device, ref.files, ref.trust_remote_code, ref.variant)
    held = state.whole
    if held is None or held.key != key or not _files_unchanged(held):
        from sweep.worker.versions import require_transformers

        require_transformers()                # a worker's own environment may differ
        held = None                           # freed before the next one loads
        if state.whole is not None:
            state.whole = None
            release_memory()
        state.whole = held = _load(ref, device, key)
    if layer is not None and not held.checked:
        check.whole(held.model, layer, ref)
        held.checked = True
    return held.model


def _load(ref: ModelRef, device: str, key: tuple) -> Whole:
    from sweep.worker.model import load_local

    model = load_local(Path(ref.location), ref.dtype, device, ref.trust_remote_code,
                       name=ref.path, revision=ref.revision)
    recorded = dict(ref.files)
    loaded = {f: h for f, h in model.identity["files_sha256"].items() if f in recorded}
    if loaded != recorded:
        changed = sorted(f for f in recorded if loaded.get(f) != recorded[f])
        raise CheckpointChanged(f"{ref.path}: {', '.join(changed)} on this worker differ from "
                                f"the files recorded when store {ref.store} was made — sweep "
                                f"the changed checkpoint into a new store")
    if ref.variant is not None:               # its weights, tensor by tensor (docs/nulls.md)
        from sweep.checkpoints import kinds
        from sweep.checkpoints.formats import open_checkpoint
        from sweep.plan.layers import decoder_layers

        kinds.maker(ref.variant).whole(model.hf, open_checkpoint(Path(ref.location)),
                                       decoder_layers(model.hf))
    return Whole(key, model, provenance.file_state(model.local_dir, recorded))


def _files_unchanged(held: Whole) -> bool:
    names = [f[0] for f in held.files]
    try:
        return provenance.file_state(held.model.local_dir, names) == held.files
    except OSError:                           # a weight file removed: load (and fail) afresh
        return False


def release_memory() -> None:
    """Free a dropped model now: HF modules hold reference cycles (so only the cyclic GC
    frees them), and glibc keeps freed heap pages unless asked to return them."""
    gc.collect()
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)
