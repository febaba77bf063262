"""What runs on a worker: a residual task, or one block of one (layer, sequence) -> its
chunks and ledger cell.

A checkpoint whose tensors load one by one (ModelRef.local) runs layer-local
(sweep/worker/resident.py): a residual task streams its sequences through the layers with one
resident and stores h_l; a block task materialises its layer alone and feeds it the stored
h_l. Otherwise the worker loads the whole model (ModelRef.not_local says why) and the generic
path decodes through layers 0..l. J_tt comes from the generic path (sweep/generic: the
model's own decoding, transformers' layer differentiated) or, where one is kept, a
hand-written fast path (sweep/blocks), which reads its h_l from the store on either route.
The first block of each model a worker runs first checks itself (sweep/generic/selfcheck.py):
a later input that moves an earlier output, or an engine's J_tt that differs from autograd of
the unmodified layer's whole-sequence call, stops the sweep before anything is written.

The worker outlives any one sweep (`tdos cluster up`, `--scheduler`), so every cache is
keyed by what decides its content, never by a path alone: the store's identity
(fingerprint + creation id: a store deleted and swept again at the same path is another
store), the checkpoint's identity (files' sha256, recorded at store creation). A cached model
is used only while its files are unchanged on disk since it was loaded (a few stat calls per
task).
"""
from __future__ import annotations

import collections
import ctypes
import functools
import gc
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from sweep.errors import CheckpointChanged, NonCausal, SelfCheckFailed
from sweep.format.ledger import is_flagged
from sweep.numerics import linalg
from sweep.plan import provenance
from sweep.store import writer as store
from sweep.tasks import ALogTask, BlockTask, DepthTask, MemoryTask, ModelRef, ResidualTask
from sweep.worker import resident, route

ARRAY_CACHE = 8            # open store groups kept per worker (metadata is read once)
MMAP_THRESHOLD = 32 << 20  # bytes: glibc's largest; smaller temporaries come from the heap
TRIM_THRESHOLD = 256 << 20  # bytes of freed heap kept for the next block instead of trimmed


@dataclass
class _CachedModel:
    model: object          # sweep.worker.model.LoadedModel
    files: tuple           # provenance.file_state of its recorded files right after loading
    checked: bool = False  # the self-check (causality, J_tt) passed on this worker


_models: dict[tuple, _CachedModel] = {}
_arrays: OrderedDict[tuple, dict] = OrderedDict()
_malloc_tuned = False
_local = threading.local()                 # per-thread J_tt buffer (_jacobian_buffer)


def run_task(task: BlockTask | ALogTask | ResidualTask | DepthTask | MemoryTask, *after) -> dict:
    """Compute and store one task (`after`: the results of the tasks it waited for, unused);
    returns layer/seq/block, status, the eigensolver, the worker's software and seconds by
    phase."""
    provenance.strict_fp32()
    planned = task.model
    task = route.routed(task, _device(task.model))
    if task.model.local:
        try:
            return _run(task)
        except resident.LocalFailed as e:
            task = route.fall_back(task, e)
    try:
        return _run(task)
    except resident.STOPS:
        raise
    except Exception as e:
        if planned.local:                  # the layer-local route failed here before
            raise route.both_failed(task, e) from e
        raise


def _run(task) -> dict:
    """`task` on the route its ModelRef says."""
    if isinstance(task, ALogTask):
        return _run_a_log(task)
    if isinstance(task, ResidualTask):
        return _run_residual(task)
    _keep_temporaries_on_heap()
    if isinstance(task, DepthTask):
        return _run_depth(task)
    if isinstance(task, MemoryTask):
        return _run_memory(task)
    clock = time.perf_counter
    t_start = clock()
    loads, read = resident.counters()
    model = _model(task.model, task.layer, task.seq)
    t = clock()
    with linalg.using(task.model.cpu_linalg) as plan:
        values, _, seconds, lib = _block(model, task, plan)
    t_eig = clock()
    status = store.write_block(arrays(task.model), task.row, task.seq, task.block, task.t0, values)
    return {"model": task.model.group, "layer": task.layer, "seq": task.seq,
            "block": task.block, "status": "flagged" if is_flagged(status) else "done",
            **_worker_fields(task.model, loads, read), "linalg": lib,
            "eig_backend": values.eig_backend, "jacobian_path": values.jacobian_path,
            "seconds": {"load": t - t_start, **seconds, "write": clock() - t_eig}}


def _worker_fields(ref: ModelRef, loads: int, read: int) -> dict:
    """The pid, route, software, and the decoder layers and bytes read from the checkpoint
    (layer-local) since the counters stood at (`loads`, `read`)."""
    now = resident.counters()
    return {"pid": os.getpid(), "route": route.name(ref), "software": _software(),
            "layer_loads": max(0, now[0] - loads), "read_bytes": max(0, now[1] - read)}


def _block(model, task: BlockTask, plan: dict):
    """One block's J_tt and what the store keeps of it: (store.BlockValues, J_tt (T, d, d) in
    this thread's reused buffer, seconds by phase, the linear algebra used)."""
    from sweep.numerics.spectra import eigvals, henrici, scale_direction, shift_direction

    clock = time.perf_counter
    t = clock()
    jac, h, delta, path, t_hidden = _jacobians(model, task)      # (T, d, d), (T, d), …
    if task.model.local:
        resident.verify(model, task.model)
    t_jac = clock()
    eig = eigvals(jac).cpu().numpy()                       # (T, d) complex
    fro2 = torch.linalg.matrix_norm(jac).double().square().cpu().numpy()   # (T,) ‖J_tt‖_F²
    rho, resid = scale_direction(jac, h)                   # (T,), (T,)
    rho_u, resid_u = shift_direction(jac)                  # (T,), (T,)
    values = store.BlockValues(
        eig, None if delta is None else delta.detach().cpu().numpy(),
        scale=(rho.cpu().numpy(), resid.cpu().numpy()),
        shift=(rho_u.cpu().numpy(), resid_u.cpu().numpy()),
        frobenius2=fro2, nonnormality=henrici(fro2, eig),
        eig_backend=_eig_backend(h, plan), jacobian_path=path)
    seconds = {"hidden": t_hidden, "jacobian": t_jac - t - t_hidden, "eig": clock() - t_jac}
    return values, jac, seconds, linalg.describe(plan) if h.device.type == "cpu" else h.device.type


def _run_depth(task: DepthTask) -> dict:
    """Walk the token block up the run: each layer's J_tt is formed once, stored as its single
    block, then multiplied into the stacks (sweep/numerics/depth.py); the stacks of `spans` are written
    as they complete, the Lyapunov exponents and the walk's ledger cell last."""
    from sweep.numerics.depth import DepthWalk

    ref, clock = task.model, time.perf_counter
    loads, read = resident.counters()
    row_of = dict((layer, row) for row, layer in task.rows)
    seconds = collections.Counter()
    flagged, walk, g = 0, None, arrays(ref)
    with linalg.using(ref.cpu_linalg) as plan:
        for row, layer in task.rows:
            t = clock()
            model = _model(ref, layer, task.seq)
            seconds["load"] += clock() - t
            block = BlockTask(ref, layer, row, task.seq, task.block, task.t0, task.t1, task.n_ctx)
            values, jac, secs, lib = _block(model, block, plan)
            seconds.update(secs)
            t = clock()
            flagged += int(is_flagged(store.write_block(g, row, task.seq, task.block, task.t0, values)))
            seconds["write"] += clock() - t
            t = clock()
            walk = walk or DepthWalk(task.spans, jac.shape[0], jac.shape[-1], dtype=jac.dtype,
                                     device=jac.device)
            for start, span, p in walk.step(layer, jac):
                store.write_stack(g, task.spans.index(span), row_of[start], task.seq, task.t0,
                                  stack_values(p, span))
            seconds["depth"] += clock() - t
        t = clock()
        store.write_lyapunov(g, task.seq, task.block, task.t0, walk.lyapunov().cpu().numpy(),
                             walk.lyapunov_qr().cpu().numpy())
        seconds["depth"] += clock() - t
    return {"model": ref.group, "seq": task.seq, "block": task.block,
            "walk_layers": [layer for _, layer in task.rows], "blocks": task.fresh,
            "status": "flagged" if flagged else "done", **_worker_fields(ref, loads, read),
            "linalg": lib, "eig_backend": values.eig_backend, "jacobian_path": values.jacobian_path,
            "seconds": dict(seconds)}


def stack_values(p, span: int):
    """store.StackValues of one stack P (T, d, d) of `span` blocks."""
    from sweep.numerics.depth import gain, span_lyapunov
    from sweep.numerics.spectra import eigvals, shift_direction

    rho, resid = shift_direction(p)                         # (T,), (T,)
    return store.StackValues(eigvals(p).cpu().numpy(), gain(p).cpu().numpy(),
                             span_lyapunov(p, span).cpu().numpy(),
                             (rho.cpu().numpy(), resid.cpu().numpy()))


def _run_memory(task: MemoryTask) -> dict:
    """m_t(k) of the task's (layer, sequence) from the layer's whole-sequence call: with one
    layer resident, fed the stored h_l; on the whole-model route, captured from the model's
    own forward."""
    from sweep.generic import selfcheck
    from sweep.numerics.memory import lag_profile

    ref, clock = task.model, time.perf_counter
    t = clock()
    loads, read = resident.counters()
    model = _model(ref, task.layer, task.seq)
    g = arrays(ref, "memory")
    ids = torch.from_numpy(np.asarray(g["tokens"][task.seq, : task.n]))
    t_load = clock()
    with torch.no_grad():
        if ref.local:
            lm = model.model
            h = resident.stored(g, task.row, task.seq, task.n, lm.dtype).to(lm.device)
            call = resident.whole_sequence_call(model, task.layer, ids, h, "the token-memory call")
        else:
            call = selfcheck.whole_sequence_call(model.hf, task.layer, ids.to(model.device))
    # Hutchinson's probes: a fixed stream per (layer, sequence), so a rerun draws the same
    m, err = lag_profile(call, task.ts, task.lags, task.probes, seed=task.layer * 1_000_003 + task.seq)
    if ref.local:
        resident.verify(model, ref)
    t_mem = clock()
    store.write_memory(g, task.row, task.seq, task.ts, m.numpy(), err.numpy())
    return {"model": ref.group, "memory_layer": task.layer, "seq": task.seq, "status": "done",
            **_worker_fields(ref, loads, read),
            "seconds": {"load": t_load - t, "memory": t_mem - t_load, "write": clock() - t_mem}}


def _jacobians(model, task: BlockTask):
    """(J_tt (T, d, d), layer inputs h (T, d), Δ (T, channels) or None, the schema's path
    name, seconds spent reading h_l) of the task's tokens."""
    ref = task.model
    local = ref.local
    dtype = model.model.dtype if local else model.dtype
    device = model.model.device if local else model.device
    d = arrays(ref)["residual"].shape[-1]
    buf = _jacobian_buffer(task.t1 - task.t0, d, dtype, device)
    t = time.perf_counter()
    h = None
    if ref.reads_residual:
        h = resident.stored(arrays(ref), task.row, task.seq, task.n_ctx, dtype).to(device)   # (n_ctx, d)
    t_hidden = time.perf_counter() - t
    ids = torch.from_numpy(np.asarray(arrays(ref)["tokens"][task.seq, : task.t1]))
    if local:
        jac, inputs, delta, path = resident.block(model, ref, task.layer, ids, h, task.t0, task.t1, buf)
        return jac, inputs, delta, path, t_hidden
    if ref.engine == "fast":
        block = model.block(task.layer)
        jac = block.jacobians(h, task.t0, task.t1, out=buf)
        return jac, h[task.t0:task.t1], block.delta(h, task.t0, task.t1), "hand-written", t_hidden
    res = model.jacobians(task.layer).run(ids, task.t0, task.t1, out=buf)
    return res.jac, res.inputs, res.delta, "generic", t_hidden


def _eig_backend(h: torch.Tensor, plan: dict) -> str:
    """The schema's name for the eigensolver sweep.numerics.spectra.eigvals used on h's device."""
    if h.device.type == "cuda":
        return "torch-cuda"
    lib = plan["eig64" if h.dtype == torch.float64 else "eig32"]
    return "scipy-openblas" if lib == "openblas" else "torch-cpu"


@functools.cache
def _software() -> dict:
    """This worker's provenance.software(), read once."""
    return provenance.software()


def _jacobian_buffer(T: int, d: int, dtype, device) -> torch.Tensor:
    """(T, d, d) of `dtype` on `device`, reused by this thread's tasks.

    A block's J_tt is 32-256 MiB (d = 1024, 8-32 tokens): above glibc's largest mmap
    threshold, so a fresh one is mapped and page-faulted anew by every task (a fresh 32 MiB
    block costs 45 ms to fill vs 4 ms reused on the development VM). Per thread: a worker
    with several threads runs several tasks at once.
    """
    buf = getattr(_local, "jac", None)
    if buf is None or buf.numel() < T * d * d or buf.dtype != dtype or buf.device != device:
        _local.jac = buf = None                                 # drop the old one first
        _local.jac = buf = torch.empty(T * d * d, dtype=dtype, device=device)
    return buf[: T * d * d].view(T, d, d)


def _keep_temporaries_on_heap() -> None:
    """glibc only, once per worker: serve the block math's MiB-sized temporaries from the heap.

    Dask starts workers with MALLOC_TRIM_THRESHOLD_=65536, which pins glibc's mmap threshold
    at 128 KiB: every larger temporary (a (d, d) J_tt is 4 MiB at d = 1024, an MLP's
    (d_ff, d) factor 16 MiB) is then a fresh mapping whose pages fault on first touch,
    ~5 us per 4 KiB page on the development VM: 36k faults per GPT-2-medium token, ~30% of
    its J_tt (benchmarks/README.md). 32 MiB is glibc's largest mmap threshold; freed heap
    up to 256 MiB is kept for the next block instead of being trimmed.
    """
    global _malloc_tuned
    if _malloc_tuned:
        return
    _malloc_tuned = True
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)   # the process's own libc symbols
    if mallopt is None:
        return
    m_trim_threshold, m_mmap_threshold = -1, -3            # glibc malloc.h
    mallopt(m_mmap_threshold, MMAP_THRESHOLD)
    mallopt(m_trim_threshold, TRIM_THRESHOLD)


def _release_memory() -> None:
    """Free a dropped model now: HF modules hold reference cycles (so only the cyclic GC
    frees them), and glibc keeps freed heap pages unless asked to return them."""
    gc.collect()
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)


def _run_a_log(task: ALogTask) -> dict:
    t = time.perf_counter()
    model = _model(task.model)
    for layer in task.layers:
        a = resident.a_log(model, layer) if task.model.local else model.a_log(layer)
        store.write_a_log(arrays(task.model), layer, a.cpu().numpy())  # (d_inner, d_state) or (heads,)
    if task.model.local:
        resident.verify(model, task.model)
    return {"model": task.model.group, "a_log_layers": list(task.layers), "status": "done",
            "pid": os.getpid(), "software": _software(),
            "seconds": {"write": time.perf_counter() - t}}


def _run_residual(task: ResidualTask) -> dict:
    """Stream the task's sequences and store every missing row's h_l."""
    t = time.perf_counter()
    model = _model(task.model)
    with torch.no_grad():
        if task.model.local:
            forwards = resident.stream(model, task, arrays(task.model))
            resident.verify(model, task.model)
        else:
            forwards = resident.whole_stream(model, task, arrays(task.model))
    return {"model": task.model.group, "residual_seqs": list(task.seqs),
            "residual_rows": [row for row, _ in task.rows], "layer_forwards": forwards,
            "status": "done", "pid": os.getpid(), "route": route.name(task.model),
            "software": _software(), "seconds": {"stream": time.perf_counter() - t}}


def _model(ref: ModelRef, layer: int | None = None, seq: int | None = None):
    """The worker's copy of the model: layer-local (sweep/worker/resident.py) where ref.local, else
    the whole model; with `layer`, the first call runs the self-check on that layer (for a
    layer-local model on sequence `seq`'s stored h_l)."""
    device = _device(ref)
    if not ref.local:
        if resident.drop():                       # one model per worker: the other route's goes
            _release_memory()
        return _whole(ref, device, layer)
    if _models:
        _models.clear()
        _release_memory()
    cached = resident.local_model(ref, device)     # built (or refused) by route.routed first
    if layer is not None and not cached.checked:
        _self_check_local(cached, layer, seq, ref)
        cached.checked = True
    return cached


def _device(ref: ModelRef) -> str:
    if ref.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return ref.device


def _whole(ref: ModelRef, device: str, layer: int | None = None):
    """The worker's copy of the whole model, loaded on first use; one model per worker at a time.

    Keyed by the files' sha256 the store recorded: a store of another checkpoint behind the
    same path gets a fresh load, and a load whose files differ from the record (the
    checkpoint or its config.json overwritten since the store was made) raises
    CheckpointChanged. A cached model whose files changed on disk since it was loaded is
    loaded again. With `layer`, the first call runs the self-check on that layer.

    Tasks come model by model (tasks.py), so dropping the previous model costs at most a
    reload at a model boundary, while keeping it would hold two copies of the weights on
    every worker of a sweep with an fp64 rerun.
    """
    key = (ref.location, ref.dtype, device, ref.files, ref.trust_remote_code, ref.null)
    cached = _models.get(key)
    if cached is None or not _files_unchanged(cached):
        from sweep.worker.versions import require_transformers

        require_transformers()                # a worker's own environment may differ
        cached = _load(ref, device, key)
    if layer is not None and not cached.checked:
        _self_check(cached.model, layer, ref)
        cached.checked = True
    return cached.model


def _load(ref: ModelRef, device: str, key: tuple) -> _CachedModel:
    from sweep.worker.model import load_local

    if _models:
        _models.clear()
        _release_memory()
    model = load_local(Path(ref.location), ref.dtype, device, ref.trust_remote_code,
                       name=ref.path, revision=ref.revision)
    recorded = dict(ref.files)
    loaded = {f: h for f, h in model.identity["files_sha256"].items() if f in recorded}
    if loaded != recorded:
        changed = sorted(f for f in recorded if loaded.get(f) != recorded[f])
        raise CheckpointChanged(f"{ref.path}: {', '.join(changed)} on this worker differ from "
                                f"the files recorded when store {ref.store} was made — sweep "
                                f"the changed checkpoint into a new store")
    if ref.null:                              # the null's weights, tensor by tensor (docs/nulls.md)
        from sweep.generic.null import Null, apply_whole

        apply_whole(model.hf, Null(*ref.null))
    _models[key] = cached = _CachedModel(model, provenance.file_state(model.local_dir, recorded))
    return cached


def _self_check(model, layer: int, ref: ModelRef) -> None:
    """Causality, then the engine's J_tt of one token against autograd of the unmodified
    layer's whole-sequence call (sweep/generic/selfcheck.py); one line on either failure."""
    from sweep.generic import selfcheck

    ids = selfcheck.probe_ids(model.vocab_size)
    call = selfcheck.whole_sequence_call(model.hf, layer, ids)
    _check(call, lambda: model.token_jacobian(layer, ids, len(ids) - 1, ref.engine), layer,
           model.kinds[layer].kind, model.dtype, ref)


def _self_check_local(cached, layer: int, seq: int, ref: ModelRef) -> None:
    """The self-check of a layer-local model: the first probe tokens of sequence `seq` with
    their stored h_l fed to the resident layer (the layer's map is checked on that input)."""
    from sweep.generic import selfcheck
    from sweep.plan.layers import layer_kinds

    g = arrays(ref)
    lm = cached.model
    n = min(selfcheck.PROBE_TOKENS, int(np.asarray(g["layer_length"]).max()))
    row = int(np.flatnonzero(np.asarray(g["layer"]) == layer)[0])
    ids = torch.from_numpy(np.asarray(g["tokens"][seq, :n]))
    h = resident.stored(g, row, seq, n, lm.dtype).to(lm.device)
    call = resident.whole_sequence_call(cached, layer, ids, h)

    def jacobian():
        return resident.block(cached, ref, layer, ids, h, n - 1, n)[0][0]

    _check(call, jacobian, layer, layer_kinds(lm.model)[layer].kind, lm.dtype, ref)


def _check(call, jacobian, layer: int, kind: str, dtype, ref: ModelRef) -> None:
    """NonCausal or SelfCheckFailed (one line) unless `call` (the layer's whole-sequence
    call) is causal and `jacobian()` (d, d) its J_tt at the last token."""
    from sweep.generic import selfcheck
    from sweep.generic.decode import DeltaUnseen
    from sweep.worker.versions import versions_note

    dep = selfcheck.later_dependence(call)
    if dep > 0:
        raise NonCausal(f"{ref.path}: layer {layer}'s output at a token depends on later tokens "
                        f"(|J_ts| / |J_tt| up to {dep:.1e} for s > t) — its sequence Jacobian is "
                        f"not block lower-triangular, so eig(J_tt) is not its spectrum; sweep a "
                        f"causal decoder-only model")
    versions = (f"under {versions_note()} — nothing was written; install a tested release or "
                f"report it")
    try:
        jac = jacobian()                                                          # (d, d)
    except DeltaUnseen as e:
        raise SelfCheckFailed(f"{ref.path}: layer {layer} ({kind}): {e} {versions}") from None
    err, bound = selfcheck.diagonal_error(call, jac), selfcheck.bound(dtype)
    if not err <= bound:
        raise SelfCheckFailed(f"{ref.path}: layer {layer} ({kind}): the {ref.engine} path's J_tt "
                              f"differs from autograd of transformers' unmodified layer by "
                              f"{err:.1e} (bound {bound:g} in {str(dtype)[6:]}) {versions}")


def _files_unchanged(cached: _CachedModel) -> bool:
    names = [f[0] for f in cached.files]
    try:
        return provenance.file_state(cached.model.local_dir, names) == cached.files
    except OSError:                           # a weight file removed: load (and fail) afresh
        return False


def arrays(ref: ModelRef, need: str | None = None) -> dict:
    """{name: zarr.Array} of the task's model group, opened once per worker and store (again
    when array `need` is missing: arrays added since, as `memory:` adds to a finished store)."""
    key = (ref.store, ref.group, ref.fingerprint, ref.store_id)
    if key not in _arrays or (need is not None and need not in _arrays[key]):
        g = store.open_group(ref.store, ref.group)
        _arrays[key] = {name: g[name] for name in g.array_keys()}
        while len(_arrays) > ARRAY_CACHE:
            _arrays.popitem(last=False)
    return _arrays[key]
