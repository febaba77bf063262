"""A memory task: m_t(k) of one (layer, sequence) from the layer's whole-sequence call
(sweep/numerics/memory.py, docs/memory.md)."""
from __future__ import annotations

import time

import numpy as np
import torch

from sweep.store import writer as store
from sweep.tasks import MemoryTask
from sweep.worker import held, resident


def run(state, task: MemoryTask) -> dict:
    """m_t(k) of the task's (layer, sequence): with one layer resident, fed the stored h_l; on
    the whole-model route, captured from the model's own forward."""
    from sweep.generic import selfcheck
    from sweep.numerics.memory import lag_profile

    state.keep_temporaries_on_heap()
    ref, clock = task.model, time.perf_counter
    t = clock()
    since = state.resident.counters()
    model = held.model(state, ref, task.layer, task.seq)
    g = state.arrays(ref, "memory")
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
            **state.fields(ref, since),
            "seconds": {"load": t_load - t, "memory": t_mem - t_load, "write": clock() - t_mem}}
