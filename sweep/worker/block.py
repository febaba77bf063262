"""A block task: one block of tokens of one (layer, sequence) -> its J_tt's spectrum and
directions in the store, and its ledger cell.

J_tt comes from the generic path (sweep/generic: the model's own decoding, transformers' layer
differentiated) or, where one is kept, a hand-written fast path (sweep/blocks), which reads
its h_l from the store on either route; a layer-local model decodes its one resident layer
fed the stored h_l (sweep/worker/resident.py).
"""
from __future__ import annotations

import time

import numpy as np
import torch

from sweep.format.ledger import is_flagged
from sweep.numerics import linalg
from sweep.store import writer as store
from sweep.tasks import BlockTask
from sweep.worker import held, resident


def run(state, task: BlockTask) -> dict:
    """Compute and store one block; layer/seq/block, status, the eigensolver and seconds."""
    state.keep_temporaries_on_heap()
    clock = time.perf_counter
    t_start = clock()
    since = state.resident.counters()
    model = held.model(state, task.model, task.layer, task.seq)
    t = clock()
    with linalg.using(task.model.cpu_linalg) as libraries:
        values, _, seconds, lib = compute(state, model, task, libraries)
    t_eig = clock()
    g = state.arrays(task.model)
    status = store.write_block(g, task.row, task.seq, task.block, task.t0, values)
    return {"model": task.model.group, "layer": task.layer, "seq": task.seq,
            "block": task.block, "status": "flagged" if is_flagged(status) else "done",
            **state.fields(task.model, since), "linalg": lib,
            "eig_backend": values.eig_backend, "jacobian_path": values.jacobian_path,
            "seconds": {"load": t - t_start, **seconds, "write": clock() - t_eig}}


def compute(state, model, task: BlockTask, libraries: dict):
    """One block's J_tt and what the store keeps of it: (store.BlockValues, J_tt (T, d, d) in
    this thread's reused buffer, seconds by phase, the linear algebra used)."""
    from sweep.numerics.spectra import eigvals, henrici, scale_direction, shift_direction

    clock = time.perf_counter
    t = clock()
    jac, h, delta, path, t_hidden = _jacobians(state, model, task)      # (T, d, d), (T, d), …
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
        eig_backend=_eig_backend(h, libraries), jacobian_path=path)
    seconds = {"hidden": t_hidden, "jacobian": t_jac - t - t_hidden, "eig": clock() - t_jac}
    return values, jac, seconds, linalg.describe(libraries) if h.device.type == "cpu" else h.device.type


def _jacobians(state, model, task: BlockTask):
    """(J_tt (T, d, d), layer inputs h (T, d), Δ (T, channels) or None, the schema's path
    name, seconds spent reading h_l) of the task's tokens."""
    ref = task.model
    local = ref.local
    dtype = model.model.dtype if local else model.dtype
    device = model.model.device if local else model.device
    g = state.arrays(ref)
    buf = state.jacobian_buffer(task.t1 - task.t0, g["residual"].shape[-1], dtype, device)
    t = time.perf_counter()
    h = None
    if ref.reads_residual:
        h = resident.stored(g, task.row, task.seq, task.n_ctx, dtype).to(device)   # (n_ctx, d)
    t_hidden = time.perf_counter() - t
    ids = torch.from_numpy(np.asarray(g["tokens"][task.seq, : task.t1]))
    if local:
        jac, inputs, delta, path = resident.block(model, ref, task.layer, ids, h, task.t0, task.t1, buf)
        return jac, inputs, delta, path, t_hidden
    if ref.engine == "fast":
        block = model.block(task.layer)
        jac = block.jacobians(h, task.t0, task.t1, out=buf)
        return jac, h[task.t0:task.t1], block.delta(h, task.t0, task.t1), "hand-written", t_hidden
    res = model.jacobians(task.layer).run(ids, task.t0, task.t1, out=buf)
    return res.jac, res.inputs, res.delta, "generic", t_hidden


def _eig_backend(h: torch.Tensor, libraries: dict) -> str:
    """The schema's name for the eigensolver sweep.numerics.spectra.eigvals used on h's device."""
    if h.device.type == "cuda":
        return "torch-cuda"
    lib = libraries["eig64" if h.dtype == torch.float64 else "eig32"]
    return "scipy-openblas" if lib == "openblas" else "torch-cpu"
