"""Stage 5, worker: task.py runs one task on a Dask worker (block, walk, memory, residual,
A_log); resident.py holds one decoder layer (layer-local route); model.py loads a whole model
from the plan's resolved checkpoint directory; versions.py checks the worker's transformers.
Imports tasks, store and plan, and the block math."""
