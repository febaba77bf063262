"""An A_log task: the decay parameters of a model's SSM layers, stored once per model."""
from __future__ import annotations

import os
import time

from sweep.store import writer as store
from sweep.tasks import ALogTask
from sweep.worker import held, resident


def run(state, task: ALogTask) -> dict:
    """A_log of every layer of the task: (d_inner, d_state) or (heads,) each."""
    t = time.perf_counter()
    ref = task.model
    model = held.model(state, ref)
    for layer in task.layers:
        a = resident.a_log(model, layer) if ref.local else model.a_log(layer)
        store.write_a_log(state.arrays(ref), layer, a.cpu().numpy())
    if ref.local:
        resident.verify(model, ref)
    return {"model": ref.group, "a_log_layers": list(task.layers), "status": "done",
            "pid": os.getpid(), "software": state.software(),
            "seconds": {"write": time.perf_counter() - t}}
