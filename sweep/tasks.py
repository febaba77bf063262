"""Plan + ledger -> the tasks still to do: per model its A_log, the residual stream h_l of
every swept layer not stored yet (one task per batch of sequences), and one task per
(layer, sequence, token block) still pending.

A residual task streams its sequences through the model one layer at a time, from the
deepest stored h at or below the first missing row (the embedding when none), and writes
every missing row's h_l; the block tasks of those sequences wait for it (sweep/run.py passes
its future), except on the whole-model generic route, which reads h_l off its own decoding.
Block tasks come model by model, layer by layer (ascending), so a worker holding one layer
uses it for every sequence before it reads the next. With `depth:`, a (sequence, token block)
is one walking task instead (DepthTask): it takes the block up the run of swept layers, one
resident layer at a time, and forms each J_tt once for both its single block and the stacks.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import zarr

from sweep.format.ledger import Ledger, is_pending
from sweep.format.variants import Variant
from sweep.plan.make import ModelPlan, Plan


@dataclass(frozen=True)
class ModelRef:
    """What a worker needs to load (and cache) a model, and where its group lives."""

    store: str
    group: str
    path: str         # model.path as the config wrote it: how messages name the model
    location: str     # the checkpoint directory the plan resolved it to: what workers load
    dtype: str
    revision: str | None
    device: str
    fingerprint: str  # of the store's config      } the store's identity: every worker
    store_id: str     # its creation_id             } cache is keyed by both
    files: tuple[tuple[str, str], ...]  # ((file, sha256), ...) recorded at store creation
    engine: str = "generic"    # "fast" | "generic"
    cpu_linalg: str = "auto"   # compute.cpu_linalg, resolved by each worker (sweep/numerics/linalg.py)
    trust_remote_code: bool = False
    # ((file, size, mtime_ns), ...) recorded with the hashes: a layer-local worker trusts a
    # file it reads whose stat agrees, and hashes the others (sweep/worker/resident.py)
    stats: tuple[tuple[str, int, int], ...] = ()
    not_local: str = ""        # why blocks load the whole model (empty: one layer resident)
    resident_layers: int = 1   # compute.resident_layers: decoder layers a worker holds at most
    # a weight variant (a null, an ensemble member: sweep/format/variants.py): its weights are
    # made on the worker from the checkpoint at `location` by its kind's registered maker
    # (sweep/checkpoints/kinds.py), per tensor; None: the checkpoint's own weights
    variant: Variant | None = None
    # (rows, sequences, spans, lags + 1) of the group: a grown store's arrays have other shapes,
    # so a worker opens them again (its open arrays are keyed by this too)
    extent: tuple[int, ...] = ()

    @property
    def local(self) -> bool:
        """Blocks hold one layer and read their input h_l from the store."""
        return not self.not_local

    @property
    def reads_residual(self) -> bool:
        """Block tasks read h_l from the store (and so wait for the residual task)."""
        return self.local or self.engine == "fast"


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

    @property
    def part(self) -> str:         # the part of the model a failure is counted under
        return f"layer {self.layer}"

    step = "the block's J_tt"      # what the task computes, as a stop names it

    def describe(self) -> str:
        return f"{self.model.group} layer {self.layer} seq {self.seq} block {self.block}"


@dataclass(frozen=True)
class ALogTask:
    """Write A_log of the given model layers (the intrinsic rates of layers with a decay)."""

    model: ModelRef
    layers: tuple[int, ...]

    @property
    def part(self) -> str:
        return f"layers {list(self.layers)}"

    step = "the A_log task"

    def describe(self) -> str:
        return f"{self.model.group} a_log layers {list(self.layers)}"


@dataclass(frozen=True)
class ResidualTask:
    """h_l of sequences `seqs` for the rows `rows` ((row, model layer), layers ascending),
    streamed over `n_ctx` tokens from the stored h of row `start` (None: the embedding)."""

    model: ModelRef
    seqs: tuple[int, ...]
    rows: tuple[tuple[int, int], ...]
    start: tuple[int, int] | None      # (row, model layer) read from the store
    n_ctx: int

    @property
    def part(self) -> str:
        return f"layers {[layer for _, layer in self.rows]}"

    step = "the residual stream"

    def describe(self) -> str:
        return f"{self.model.group} residual stream of seqs {list(self.seqs)}"


@dataclass(frozen=True)
class DepthTask:
    """The token block [t0, t1) of one sequence walked up `rows` ((row, model layer), one
    contiguous run, ascending): every single block, the stacks of `spans` and the run's
    Lyapunov exponents."""

    model: ModelRef
    seq: int
    block: int
    t0: int
    t1: int
    n_ctx: int
    rows: tuple[tuple[int, int], ...]
    spans: tuple[int, ...]
    fresh: int        # of its single blocks, those still pending when planned (progress)

    @property
    def part(self) -> str:
        return f"layers {self.rows[0][1]}..{self.rows[-1][1]}"

    step = "the walk up the layers"

    def describe(self) -> str:
        return f"{self.model.group} walk of seq {self.seq} block {self.block} up {self.part}"


@dataclass(frozen=True)
class MemoryTask:
    """m_t(k) of one (layer, sequence) at output tokens `ts` (sweep/numerics/memory.py)."""

    model: ModelRef
    layer: int
    row: int
    seq: int
    n: int                        # tokens of the row: the whole-sequence call's length
    ts: tuple[int, ...]           # sampled output tokens
    lags: int
    probes: int

    @property
    def part(self) -> str:
        return f"layer {self.layer}"

    step = "the token-memory call"

    def describe(self) -> str:
        return f"{self.model.group} token memory of layer {self.layer} seq {self.seq}"


Task = BlockTask | ALogTask | ResidualTask | DepthTask | MemoryTask


def pending_tasks(plan: Plan, root: zarr.Group) -> list[Task]:
    """Only what the store lacks: A_log layers still NaN, residual rows not stored (where
    blocks still need them), ledger cells at 0."""
    tasks: list[Task] = []
    for m in plan.models:
        g = root[m.name]
        ref = model_ref(plan, m, root)
        led = Ledger.read(g).within(m.layers, m.tokens.shape[0])   # a shrunk config: its part
        if led.missing_a_log:
            tasks.append(ALogTask(ref, led.missing_a_log))
        n_ctx = int(led.lengths.max())
        walks = led.pending_walks()
        walking = set(walks)
        pending = [c for c in led.pending() if (c[1], c[2]) not in walking]
        profiles = led.pending_memory()
        if ref.reads_residual:
            waiting = sorted({seq for _, seq, _ in pending} | {seq for seq, _ in walks}
                             | {seq for _, seq in profiles})
            tasks += residual_tasks(ref, led, waiting, n_ctx, residual_batch(m, n_ctx))
        tasks += depth_tasks(plan, m, ref, led, walks, n_ctx)
        depth = np.argsort(np.argsort(led.layers, kind="stable"))     # rank of each row by layer
        for row, seq, block in sorted(pending, key=lambda c: (depth[c[0]], c[1], c[2])):
            t0 = block * plan.token_block
            tasks.append(BlockTask(ref, int(led.layers[row]), row, seq, block, t0,
                                   min(t0 + plan.token_block, int(led.lengths[row])), n_ctx))
        mem = plan.config.memory
        for row, seq in sorted(profiles, key=lambda c: (depth[c[0]], c[1])):
            n = int(led.lengths[row])
            tasks.append(MemoryTask(ref, int(led.layers[row]), row, seq, n,
                                    tuple(range(0, n, mem.every)), mem.lags, mem.probes))
    return tasks


def depth_tasks(plan: Plan, m: ModelPlan, ref: ModelRef, led: Ledger, walks, n_ctx: int) -> list[DepthTask]:
    """One DepthTask per unfinished walk (seq, block): its single blocks are redone with it,
    since the stacks need every J_tt of the block again."""
    if not walks:
        return []
    rows = tuple(sorted(((r, int(layer)) for r, layer in enumerate(led.layers)), key=lambda x: x[1]))
    length = int(led.lengths.min())
    spans = tuple(led.group.attrs["depth"]["spans"])     # the store's order: a grown store appends
    out = []
    for seq, block in walks:
        t0 = block * plan.token_block
        fresh = int(sum(is_pending(led.cells[r, seq, block]) for r, _ in rows))
        out.append(DepthTask(ref, seq, block, t0, min(t0 + plan.token_block, length), n_ctx, rows,
                             spans, fresh))
    return out


def residual_batch(m: ModelPlan, n_ctx: int) -> int:
    """Sequences streamed together: their h (two layers' worth, in the compute dtype) take at
    most what one layer's weights take, so a layer is read once per batch, not per sequence."""
    return max(1, m.info.block_params // (2 * n_ctx * m.info.d_model))


def residual_tasks(ref: ModelRef, led: Ledger, seqs, n_ctx: int, batch: int) -> list[ResidualTask]:
    """ResidualTasks of sequences `seqs` whose h_l is missing at some row, grouped by the rows
    they miss and where they start, `batch` sequences at most per task."""
    by_layer = sorted(range(len(led.layers)), key=lambda r: led.layers[r])
    groups: dict[tuple, list[int]] = {}
    for seq in seqs:
        missing = [r for r in by_layer if is_pending(led.residual[r, seq])]
        if not missing:
            continue
        first = int(led.layers[missing[0]])
        stored = [r for r in by_layer if led.layers[r] <= first and r not in missing]
        start = (stored[-1], int(led.layers[stored[-1]])) if stored else None
        rows = tuple((r, int(led.layers[r])) for r in missing)
        groups.setdefault((rows, start), []).append(seq)
    return [ResidualTask(ref, tuple(group[i:i + batch]), rows, start, n_ctx)
            for (rows, start), group in groups.items() for i in range(0, len(group), batch)]


def model_ref(plan: Plan, m: ModelPlan, root: zarr.Group) -> ModelRef:
    files = root[m.name].attrs["checkpoint"]["files"]
    c = plan.config.compute
    return ModelRef(store=plan.store, group=m.name, path=m.spec.path,
                    location=m.checkpoint["dir"], dtype=m.spec.dtype,
                    revision=m.spec.revision, device=c.device, fingerprint=plan.fingerprint,
                    store_id=root.attrs["creation_id"],
                    files=tuple(sorted((f, r["sha256"]) for f, r in files.items())),
                    engine=m.engine, cpu_linalg=c.cpu_linalg,
                    trust_remote_code=m.spec.trust_remote_code,
                    stats=tuple(sorted((f, r["size"], r["mtime_ns"]) for f, r in files.items()
                                       if "size" in r)),
                    not_local=m.info.not_local, resident_layers=c.resident_layers,
                    variant=m.variant,
                    extent=_extent(root[m.name]))


def _extent(g: zarr.Group) -> tuple[int, ...]:
    R, S = g["ledger"].shape[:2]
    spans = g["stack_gain"].shape[0] if "stack_gain" in g else 0
    return R, S, spans, g["memory"].shape[3] if "memory" in g else 0
