"""A residual task: its sequences streamed through the model, every missing row's h_l stored
(sweep/worker/resident.py: one layer resident, or the whole model's own forward)."""
from __future__ import annotations

import os
import time

import torch

from sweep.tasks import ResidualTask
from sweep.worker import held, resident, route


def run(state, task: ResidualTask) -> dict:
    """Stream the task's sequences and store every missing row's h_l."""
    t = time.perf_counter()
    ref = task.model
    model = held.model(state, ref)
    with torch.no_grad():
        if ref.local:
            forwards = resident.stream(model, task, state.arrays(ref))
            resident.verify(model, ref)
        else:
            forwards = resident.whole_stream(model, task, state.arrays(ref))
    return {"model": ref.group, "residual_seqs": list(task.seqs),
            "residual_rows": [row for row, _ in task.rows], "layer_forwards": forwards,
            "status": "done", "pid": os.getpid(), "route": route.name(ref),
            "software": state.software(), "seconds": {"stream": time.perf_counter() - t}}
