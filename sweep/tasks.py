"""Plan + ledger -> the tasks still to do: one per (model, layer, sequence, token block), and
one per model writing its A_log.

Tasks come model by model, sequence by sequence with layers ascending, so a worker keeps one
model loaded, and a worker on a hand-written fast path that already holds the hidden states
entering layer l advances them to the next layer instead of starting over.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import zarr

from sweep.ledger import Ledger
from sweep.plan import ModelPlan, Plan


@dataclass(frozen=True)
class ModelRef:
    """What a worker needs to load (and cache) a model, and where its group lives."""

    store: str
    group: str
    path: str
    dtype: str
    revision: str | None
    device: str
    fingerprint: str  # of the store's config      } the store's identity: every worker
    store_id: str     # its creation_id             } cache is keyed by both
    files: tuple[tuple[str, str], ...]  # ((file, sha256), ...) recorded at store creation
    engine: str = "generic"    # "fast" | "generic"
    cpu_linalg: str = "auto"   # compute.cpu_linalg, resolved by each worker (sweep/linalg.py)
    trust_remote_code: bool = False


@dataclass(frozen=True)
class BlockTask:
    """Eigenvalues of J_tt for t in [t0, t1) of one (layer, sequence)."""

    model: ModelRef
    layer: int        # model layer index
    row: int          # index along the store's `layer` dimension
    seq: int
    block: int
    t0: int
    t1: int
    n_ctx: int        # tokens the fast path's hidden states span (the model's longest row)


@dataclass(frozen=True)
class ALogTask:
    """Write A_log of the given model layers (the intrinsic rates of Mamba-style layers)."""

    model: ModelRef
    layers: tuple[int, ...]


Task = BlockTask | ALogTask


def pending_tasks(plan: Plan, root: zarr.Group) -> list[Task]:
    """Only what the store lacks: ledger cells at 0, A_log layers still NaN."""
    tasks: list[Task] = []
    for m in plan.models:
        g = root[m.name]
        ref = model_ref(plan, m, root)
        led = Ledger.read(g)
        if led.missing_a_log:
            tasks.append(ALogTask(ref, led.missing_a_log))
        n_ctx = int(led.lengths.max())
        depth = np.argsort(np.argsort(led.layers, kind="stable"))     # rank of each row by layer
        for row, seq, block in sorted(led.pending(), key=lambda c: (c[1], depth[c[0]], c[2])):
            t0 = block * plan.token_block
            tasks.append(BlockTask(ref, int(led.layers[row]), row, seq, block, t0,
                                   min(t0 + plan.token_block, int(led.lengths[row])), n_ctx))
    return tasks


def model_ref(plan: Plan, m: ModelPlan, root: zarr.Group) -> ModelRef:
    files = root[m.name].attrs["checkpoint"]["files"]
    c = plan.config.compute
    return ModelRef(store=plan.store, group=m.name, path=m.spec.path, dtype=m.spec.dtype,
                    revision=m.spec.revision, device=c.device, fingerprint=plan.fingerprint,
                    store_id=root.attrs["creation_id"],
                    files=tuple(sorted((f, r["sha256"]) for f, r in files.items())),
                    engine=m.engine, cpu_linalg=c.cpu_linalg,
                    trust_remote_code=m.spec.trust_remote_code)
