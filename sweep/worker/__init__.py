"""Stage 5, worker: task.py runs one task on a Dask worker through its table of handlers, one
module per task kind (block, depth, memory, residual, a_log); state.py holds everything a
worker keeps between tasks (WorkerState, one per Dask worker through plugin.py); held.py gives a task its model,
route.py its route, check.py the first block's self-check; resident.py holds one decoder
layer (layer-local route); model.py loads a whole model from the plan's resolved checkpoint
directory; versions.py checks the worker's transformers. Imports tasks, store and plan, and
the block math."""
