"""The layer-local route on a worker: one decoder layer resident, its input read from the store.

A worker keeps one `LocalModel` (sweep/generic/local.py) per checkpoint: the skeleton on
meta, at most `compute.resident_layers` decoder layers materialised, and the embedding rows
of the current sequence. It is keyed, like the whole-model cache, by what decides its
content: the path, revision, dtype, device and the files' sha256 the client recorded when
the store was made. No worker hashes the whole checkpoint: a file is checked when the model
first reads from it (config.json and the shards holding the layers it loads), by its size
and mtime against the record and, where those differ (another copy of the checkpoint), by
its sha256. A file whose state changes after it was read drops the model.

- `stream(task, arrays)` runs a residual task: its sequences through layers start..deepest,
  one layer resident, every missing row's h_l written (store.write_residual);
- `block(task, ids, h, buf)` gives J_tt of a block of tokens from the stored h_l, by the
  model's own decoding with h_l fed in (generic) or the hand-written BlockOps (fast);
- `whole_stream(model, task, arrays)` is the residual task of a checkpoint that loads only
  whole (ModelRef.not_local says why): the inputs of the swept layers in one forward.
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from sweep.errors import CheckpointChanged, NonCausal, SelfCheckFailed, UnsupportedTransformers
from sweep.format.ledger import is_done
from sweep.numerics.dtypes import torch_dtype
from sweep.plan import provenance
from sweep.store import writer as store
from sweep.tasks import ModelRef, ResidualTask


@dataclass
class _Cached:
    key: tuple                         # what decides its content (Resident.model)
    model: object                      # sweep.generic.local.LocalModel
    local_dir: Path
    lock: threading.Lock = field(default_factory=threading.Lock)   # one task uses it at a time
    states: dict = field(default_factory=dict)    # file -> provenance.file_state when checked
    engines: dict = field(default_factory=dict)   # layer -> LayerJacobians
    checked: bool = False                         # the self-check passed on this worker


# what stops a sweep whatever the route (sweep/run.py): never a reason to leave this one
STOPS = (CheckpointChanged, NonCausal, SelfCheckFailed, UnsupportedTransformers)


class LocalFailed(Exception):
    """A step of the layer-local route failed on this worker (sweep/worker/task.py moves the
    model to the whole-model route and says why)."""

    def __init__(self, step: str, error: Exception):
        super().__init__(f"{step}: {type(error).__name__}: {error}")
        self.step, self.error = step, error


@contextlib.contextmanager
def step(name: str):
    """Any failure inside, bar the sweep's stops, is this route's own: LocalFailed(name)."""
    from sweep.generic.decode import DeltaUnseen

    try:
        yield
    except (LocalFailed, DeltaUnseen, *STOPS):     # DeltaUnseen: the self-check's to report
        raise
    except Exception as e:
        raise LocalFailed(name, e) from e


@dataclass
class Resident:
    """The worker's one LocalModel (a part of its WorkerState, sweep/worker/state.py): one
    checkpoint at a time, since a second would hold a second set of resident layers."""

    held: _Cached | None = None

    def model(self, ref: ModelRef, device: str) -> _Cached:
        """The LocalModel of `ref`, built on first use."""
        key = (ref.location, ref.dtype, device, ref.files, ref.trust_remote_code,
               ref.resident_layers, ref.variant)
        if self.held is not None and (self.held.key != key or not _unchanged(self.held)):
            self.drop()
        if self.held is None:
            self.held = _build(ref, device, key)
        return self.held

    def drop(self) -> bool:
        """Forget the LocalModel; whether there was one."""
        had = self.held is not None
        self.held = None
        return had

    def counters(self) -> tuple[int, int]:
        """(decoder layers, bytes) the LocalModel has read so far ((0, 0) without one)."""
        if self.held is None:
            return 0, 0
        return self.held.model.loads, self.held.model.ckpt.read_bytes


def _build(ref: ModelRef, device: str, key: tuple) -> _Cached:
    from sweep.generic.local import LocalModel
    from sweep.worker.model import prepare, quiet_transformers

    quiet_transformers()
    local = Path(ref.location)         # the plan's resolved checkpoint directory
    dtype = torch_dtype(ref.dtype)
    with step("building the layer-local model"):
        lm = LocalModel(local, dtype, ref.trust_remote_code, keep=ref.resident_layers, device=device,
                        variant=ref.variant)
        prepare(lm.model, dtype)
    return _Cached(key, lm, local)


def verify(cached: _Cached, ref: ModelRef) -> None:
    """CheckpointChanged unless every file the model has read (and its config file) is the one
    recorded when the store was made."""
    recorded = dict(ref.files)
    stats = {name: (size, mtime) for name, size, mtime in ref.stats}
    for name in sorted(cached.model.ckpt.files_read | set(cached.model.ckpt.config_files)):
        if name in cached.states:
            continue
        path = provenance.checkpoint_file(cached.local_dir, name)
        state = provenance.file_state(cached.local_dir, [name])
        same_stat = stats.get(name) == state[0][1:3]
        if name not in recorded or not (same_stat or provenance.sha256_file(path) == recorded[name]):
            raise CheckpointChanged(f"{ref.path}: {name} on this worker differs from the file "
                                    f"recorded when store {ref.store} was made — sweep the "
                                    f"changed checkpoint into a new store")
        cached.states[name] = state


def _unchanged(cached: _Cached) -> bool:
    try:
        return all(provenance.file_state(cached.local_dir, [n]) == s for n, s in cached.states.items())
    except OSError:
        return False


def stream(cached: _Cached, task: ResidualTask, arrays: dict) -> int:
    """Write the task's rows of h_l for its sequences; returns the decoder-layer calls made."""
    lm = cached.model
    ids = {s: torch.from_numpy(np.asarray(arrays["tokens"][s, : task.n_ctx])) for s in task.seqs}
    with cached.lock, step("the residual stream"):
        before = lm.forwards
        lm.sequence(torch.cat([ids[s] for s in task.seqs]))     # every sequence's rows at once
        if task.start is None:
            hs, layer = {s: lm.embedded(ids[s]) for s in task.seqs}, 0
        else:
            row, layer = task.start
            hs = {s: stored(arrays, row, s, task.n_ctx, lm.dtype) for s in task.seqs}
        for row, target in task.rows:
            while layer < target:                     # one layer resident for every sequence
                hs = {s: lm.step(ids[s], hs[s], layer) for s in task.seqs}
                layer += 1
            for s in task.seqs:
                store.write_residual(arrays, row, s, hs[s].cpu().numpy())
        return lm.forwards - before


def whole_stream(model, task: ResidualTask, arrays: dict) -> int:
    """The residual task on a whole model: the swept layers' inputs in its own no-cache
    forward of each sequence, stopped after the deepest; returns the layer calls made."""
    from sweep.plan.layers import decoder_layers

    layers = decoder_layers(model.hf)
    wanted = {target for _, target in task.rows}
    deepest = max(wanted)

    class Done(Exception):
        pass

    for s in task.seqs:
        seen = {}

        def take(i):
            def hook(module, args, kwargs):
                seen[i] = (args[0] if args else kwargs["hidden_states"])[0].detach().clone()
                if i == deepest:
                    raise Done
            return hook

        hooks = [layers[i].register_forward_pre_hook(take(i), with_kwargs=True) for i in wanted]
        ids = torch.from_numpy(np.asarray(arrays["tokens"][s, : task.n_ctx]))
        try:
            with torch.no_grad():
                model.hf(ids[None].to(model.device), use_cache=False)
        except Done:
            pass
        finally:
            for h in hooks:
                h.remove()
        for row, target in task.rows:
            store.write_residual(arrays, row, s, seen[target].cpu().numpy())
    return deepest * len(task.seqs)


def stored(arrays: dict, row: int, seq: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """(n, d) h_l of `row`, `seq` as the residual task wrote it."""
    if not is_done(arrays["residual_ledger"][row, seq]):
        raise RuntimeError(f"h_l of layer row {row}, sequence {seq} is not in the store: its "
                           f"residual task has not run")
    return torch.from_numpy(np.asarray(arrays["residual"][row, seq, :n])).to(dtype)


def block(cached: _Cached, ref: ModelRef, layer: int, ids: torch.Tensor, h: torch.Tensor,
          t0: int, t1: int, buf: torch.Tensor | None = None):
    """(J_tt (T, d, d), layer inputs (T, d), Δ (T, channels) or None, path) of tokens [t0, t1)
    of `layer`: `ids` (t1,) the sequence's tokens, `h` (>= t1, d) its stored h_l."""
    lm = cached.model
    with cached.lock, step(f"the decoding of layer {layer}"):
        lm.sequence(ids, h)                  # first: the stand-ins' probe runs on its rows
        lm.resident(layer)
        if ref.engine == "fast":
            from sweep.blocks import FAST

            ops = FAST[lm.model.config.model_type](lm.model, layer)
            jac = ops.jacobians(h, t0, t1, out=buf)
            return jac, h[t0:t1], ops.delta(h, t0, t1), "hand-written"
        from sweep.generic.decode import LayerJacobians

        if layer not in cached.engines:
            cached.engines[layer] = LayerJacobians(lm.model, layer, fresh=lm.fresh, on_forward=lm.at)
        with lm.injected():
            res = cached.engines[layer].run(ids, t0, t1, out=buf)
        return res.jac, res.inputs, res.delta, "generic"


def whole_sequence_call(cached: _Cached, layer: int, ids: torch.Tensor, h: torch.Tensor,
                        what: str = "the self-check's whole-sequence call"):
    """The layer's whole-sequence call (sweep/generic/selfcheck.py) with h_l fed in, through
    the same stand-ins as the layer's blocks; `what` names the step in a failure."""
    from sweep.generic import selfcheck

    lm = cached.model
    with cached.lock, step(f"{what} of layer {layer}"):
        lm.sequence(ids, h)
        lm.resident(layer)
        lm.at(0, len(ids))
        with lm.injected():
            return selfcheck.whole_sequence_call(lm.model, layer, ids)


def a_log(cached: _Cached, layer: int) -> torch.Tensor | None:
    """A_log of a layer with a decay (Mamba-style, gated delta rule), read with that layer
    resident."""
    from sweep.plan.layers import a_log

    lm = cached.model
    with cached.lock, step(f"the A_log task of layer {layer}"):
        lm.resident(layer)
        a = a_log(lm.layers[layer])
        return None if a is None else a.clone()
