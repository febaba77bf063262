"""What runs on a worker: one task of any kind -> its chunks and ledger cell.

`HANDLERS` names the module that runs each task kind: a block of one (layer, sequence)
(block.py), a block walked up the run (depth.py), a layer's token memory (memory.py), a
model's residual stream (residual.py), its A_log (a_log.py). Every handler takes the
worker's `WorkerState` (state.py), which holds all a worker keeps between tasks.

A checkpoint whose tensors load one by one (ModelRef.local) runs layer-local
(sweep/worker/resident.py): a residual task streams its sequences through the layers with one
resident and stores h_l; a block task materialises its layer alone and feeds it the stored
h_l. Otherwise the worker loads the whole model (ModelRef.not_local says why) and the generic
path decodes through layers 0..l (held.py). A model planned layer-local whose route fails on
this worker moves to the whole model (route.py). The first block of each model a worker runs
first checks itself (check.py).

The worker outlives any one sweep (`tdos cluster up`, `--scheduler`), so every cache is
keyed by what decides its content, never by a path alone: the store's identity
(fingerprint + creation id: a store deleted and swept again at the same path is another
store), the checkpoint's identity (files' sha256, recorded at store creation). A held model
is used only while its files are unchanged on disk since it was loaded (a few stat calls per
task).
"""
from __future__ import annotations

from types import MappingProxyType

from sweep.plan import provenance
from sweep.tasks import ALogTask, BlockTask, DepthTask, MemoryTask, ResidualTask
from sweep.worker import a_log, block, depth, held, memory, residual, resident, route
from sweep.worker.plugin import worker_state
from sweep.worker.state import WorkerState

# task kind -> handler(state, task) -> result dict
HANDLERS = MappingProxyType({
    BlockTask: block.run,
    DepthTask: depth.run,
    MemoryTask: memory.run,
    ResidualTask: residual.run,
    ALogTask: a_log.run,
})


def run_task(task: BlockTask | ALogTask | ResidualTask | DepthTask | MemoryTask, *after,
             state: WorkerState | None = None) -> dict:
    """Compute and store one task (`after`: the results of the tasks it waited for, unused);
    returns layer/seq/block, status, the eigensolver, the worker's software and seconds by
    phase. `state`: the Dask worker's own (plugin.worker_state) unless given."""
    if state is None:
        state = worker_state()
    provenance.strict_fp32()
    handler = HANDLERS[type(task)]
    planned = task.model
    task = route.routed(state, task, held.device(task.model))
    if task.model.local:
        try:
            return handler(state, task)
        except resident.LocalFailed as e:
            task = route.fall_back(state, task, e)
    try:
        return handler(state, task)
    except resident.STOPS:
        raise
    except Exception as e:
        if planned.local:                  # the layer-local route failed here before
            raise route.both_failed(task, e) from e
        raise
