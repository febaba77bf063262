"""Which route a worker takes for a model, and what happens when the layer-local one fails.

A model planned layer-local (ModelRef.local) runs one layer at a time (sweep/worker/
resident.py) until a step of that route fails on this worker: building the one-layer model
(NotLocal included), the stand-ins, the injection of h_l, the residual stream, the A_log
task, the self-check's whole-sequence call (resident.LocalFailed names the step). The task
and every later one of that model on this worker then run on the whole model, and the
task's route says why in one line (the client says it once per model). If the whole model
fails too, the task raises RouteFailed: one line naming the model, the layer, the step and
the transformers release, which stops the sweep.
"""
from __future__ import annotations

import dataclasses

from sweep.errors import RouteFailed
from sweep.tasks import ModelRef
from sweep.worker import resident


def routed(state, task, device: str):
    """`task` on the route this worker takes: a model planned layer-local that this worker
    could not build one layer at a time, or whose layer-local route failed here, goes
    whole-model, its reason in the task's route. `state.fallback` keeps the decision per
    checkpoint: (location, files) -> why this worker runs it whole ("": it doesn't)."""
    ref = task.model
    if not ref.local:
        return task
    key = (ref.location, ref.files)
    if key not in state.fallback:
        from sweep.worker.versions import require_transformers

        require_transformers()                # a worker's own environment may differ
        try:
            state.resident.model(ref, device)
            state.fallback[key] = ""
        except resident.LocalFailed as e:
            state.fallback[key] = why(e)
    if not state.fallback[key]:
        return task
    return dataclasses.replace(task, model=dataclasses.replace(ref, not_local=state.fallback[key]))


def why(failure: resident.LocalFailed) -> str:
    """The one line a model's fallback is said with."""
    from sweep.generic.local import NotLocal

    if isinstance(failure.error, NotLocal) and failure.step.startswith("building"):
        return f"this worker cannot hold one layer: {failure.error}"
    return f"the layer-local route failed on this worker in {failure}"


def fall_back(state, task, failure: resident.LocalFailed):
    """`task` moved to the whole-model route after `failure`, as every later task of its
    model on this worker (`state`); the one-layer model is dropped."""
    ref = task.model
    state.fallback[(ref.location, ref.files)] = why(failure)
    state.resident.drop()
    return dataclasses.replace(task, model=dataclasses.replace(ref, not_local=why(failure)))


def both_failed(task, error: Exception) -> RouteFailed:
    """The stop of a model that failed on both routes: model, layer, step, release."""
    import transformers

    ref = task.model
    return RouteFailed(f"{ref.path}: {task.part}, {task.step}: the whole model failed too after the "
                       f"layer-local route ({ref.not_local}): {type(error).__name__}: {error} — "
                       f"under transformers {transformers.__version__}; nothing more of this "
                       f"model is swept: report it with this line")


def name(ref: ModelRef) -> str:
    """How the worker holds the model: one layer, or the whole model and why."""
    return "layer-local" if ref.local else f"whole model ({ref.not_local})"
