"""How a Dask worker finds its WorkerState (sweep/worker/state.py): `WorkerStatePlugin`,
registered by the client (sweep/run.py), gives every worker of a cluster, those joining later
too, one; `worker_state()` finds it inside a task.

Light on purpose: a worker unpickles its plugins in its event loop while it registers with the
scheduler, so this module imports neither torch nor the store; the WorkerState itself is made
by the worker's first task, in the task's thread.
"""
from __future__ import annotations

import threading

from distributed.diagnostics.plugin import WorkerPlugin

PLUGIN = "tdos-worker-state"


class WorkerStatePlugin(WorkerPlugin):
    """One WorkerState per worker, made on first use; it goes with the worker."""

    name = PLUGIN
    idempotent = True              # registered again by a later sweep: the workers keep theirs

    def setup(self, worker=None):
        self._lock = threading.Lock()    # the worker's threads ask at once on its first tasks
        self._state = None

    def teardown(self, worker=None):
        self._state = None

    def state(self):
        with self._lock:
            if self._state is None:
                from sweep.worker.state import WorkerState

                self._state = WorkerState()
            return self._state


def worker_state():
    """The WorkerState of the Dask worker running this task."""
    from distributed import get_worker

    try:
        plugin = get_worker().plugins.get(PLUGIN)
    except ValueError:                        # distributed: "No worker found"
        raise RuntimeError("run_task outside a Dask worker needs its state: "
                           "run_task(task, state=WorkerState())") from None
    if plugin is None:
        raise RuntimeError(f"this worker has no {PLUGIN} plugin: the client registers "
                           f"WorkerStatePlugin before it submits run_task (sweep/run.py)")
    return plugin.state()
