"""What a sweep will cost before it runs: blocks, bytes on disk, memory per worker, core-hours.

Everything here comes from the plan (sweep/plan/make.py: the config and the checkpoints'
headers; no weights are loaded), so `tdos sweep --dry-run` answers in seconds, and a real
run refuses a sweep whose store cannot fit on the disk or whose workers cannot fit in
memory before the store exists. One question a room:

    sweep/budget/time.py     core-seconds from measured per-token and per-task costs, by term
                             (measured.py: its fitted constants, generated from the record)
    sweep/budget/memory.py   one worker's peak bytes and what they are made of
    sweep/budget/host.py     what this machine (and Dask's limit) offers: disk, memory, the
                             threshold a worker is stopped at; the store's size
    sweep/budget/power.py    what each declared test can detect (variances.json: SmolLM2's)

`size_sweep(plan) -> Budget` puts them together; `Budget.table()` is what --dry-run prints.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from sweep.budget.host import WorkerLimit, du, free, memory_total, size, store_bytes, worker_limit
from sweep.budget.memory import GRAPH_PER_TOKEN, JAC_CHUNK, GiB, MiB, gib, worker_bytes
from sweep.budget.power import design, proposals
from sweep.budget.time import (DEPTH_D, DEPTH_SECONDS_PER_STEP, GPU_TOKEN_SPEEDUP, TimeEstimate,
                               at_width, measured_line, sweep_seconds)
from sweep.errors import ConfigError
from sweep.plan.make import Plan
from sweep.process import ProcessTerm, process_term

__all__ = ["Budget", "Row", "WorkerLimit", "size_sweep", "check_fits", "worker_limit", "at_width",
           "GiB", "MiB", "JAC_CHUNK", "GRAPH_PER_TOKEN", "DEPTH_D", "DEPTH_SECONDS_PER_STEP"]


@dataclass(frozen=True)
class Row:
    model: str
    dtype: str
    layer: int
    tokens: int                     # planned tokens of this layer (its layer_length)
    blocks: int                     # sequences x ceil(tokens / token_block)


@dataclass(frozen=True)
class Budget:
    """What the sweep of a Plan will cost here: its blocks, the store's bytes against the
    disk, one worker's peak memory against Dask's limit, core-hours (`size_sweep`)."""

    rows: tuple[Row, ...]
    store: str
    workers: int
    store_bytes: int                # the finished store, uncompressed (an upper bound)
    store_bytes_now: int            # already on disk (a resumed store)
    disk_free: int                  # at the store's nearest existing directory
    worker_bytes: int               # peak resident memory of one worker (an upper bound)
    worker_parts: str               # what worker_bytes is made of, for the dry run
    memory_total: int               # physical memory of this machine
    local: bool                     # workers run on this machine (their memory is checked)
    time: TimeEstimate              # core-seconds by term, the client's wall (sweep/budget/time.py)
    limit: WorkerLimit | None = None  # Dask's limit per worker, where this machine can tell
    process: ProcessTerm | None = None  # the measured process term inside worker_bytes
    growth: str = ""                # what the sweep adds to its existing store (sweep/store/grow.py)
    power: tuple = ()               # TestPower of every declared test (sweep/budget/power.py)
    proposals: tuple = ()           # other splits of the nulls' cost that detect smaller |Δ|
    study: str = ""                 # the declared family, in words
    gpu_seconds: float = 0.0        # wall on one GPU worker (assumed speed, sweep/budget/time.py)

    @property
    def blocks(self) -> int:
        return sum(r.blocks for r in self.rows)

    @property
    def core_seconds(self) -> float:
        return self.time.core_seconds

    @property
    def wall_seconds(self) -> float:
        return self.time.wall_seconds

    def summary(self) -> str:
        """One line: what `tdos sweep` prints when it starts."""
        mem = (f"<= {gib(self.worker_bytes)} per worker x {self.workers}"
               + (f" of {gib(self.memory_total)} RAM" if self.local else ""))
        return (f"budget: {self.blocks} blocks over {len(self.rows)} layer rows; store "
                f"<= {size(self.store_bytes)} ({size(self.disk_free)} free); {mem}; "
                f"~{self.core_seconds / 3600:.2g} core-hours")

    def table(self) -> str:
        """Blocks per model and layer, then the totals (what --dry-run prints)."""
        width = max(12, *(len(r.model) for r in self.rows))
        lines = [f"{'model':<{width}} {'dtype':<8} {'layer':>5} {'tokens':>6} {'blocks':>6}"]
        lines += [f"{r.model:<{width}} {r.dtype:<8} {r.layer:>5} {r.tokens:>6} {r.blocks:>6}"
                  for r in self.rows]
        hours = self.core_seconds / 3600
        lines += [
            f"blocks: {self.blocks}",
            *([f"store: {self.growth}"] if self.growth else []),
            f"store on disk: <= {size(self.store_bytes)} uncompressed "
            f"({size(self.store_bytes_now)} already there, {size(self.disk_free)} free)",
            f"peak memory per worker: <= {gib(self.worker_bytes)} "
            f"({self.workers} worker(s); this machine has {gib(self.memory_total)})"
            + (f"; per worker {gib(self.limit.bytes)} ({self.limit.field})" if self.limit else ""),
            f"  = {self.worker_parts}",
            *([f"  process: {self.process.describe()}"] if self.process else []),
            *([f"  {self.limit.line()}"] if self.limit else []),
            f"compute: ~{hours:.2g} core-hours on CPU (~{self.wall_seconds / 60:.3g} min wall "
            f"on {self.workers} worker(s)), from measured costs (sweep/budget/time.py)",
            f"  = core-minutes: {self.time.describe()}; and {self.time.client:.0f} s of the "
            f"client's own",
            f"  one GPU worker: ~{_hours(self.gpu_seconds)} wall, if J_tt and eig ran "
            f"{GPU_TOKEN_SPEEDUP:g}x one core's speed there (assumed: no GPU was measured; "
            f"docs/performance.md)",
            f"  {measured_line()}",
            *self._design_lines(),
        ]
        return "\n".join(lines)

    def _design_lines(self) -> list[str]:
        if not self.study:
            return []
        return [f"design: {self.study}; the smallest |Δ| each test detects with 80 % power at "
                f"Holm's first step, from SmolLM2's measured variances (docs/power.md):",
                *(t.line() for t in self.power),
                *(["a split of the same null cost that detects smaller |Δ|:", *self.proposals]
                  if self.proposals else [])]

    def refusal(self) -> str | None:
        """Why this sweep cannot run here (disk or memory), with the numbers; else None."""
        need = self.store_bytes - self.store_bytes_now
        if need > self.disk_free:
            return (f"store: the sweep needs up to {size(need)} more on disk, {self.store} has "
                    f"{size(self.disk_free)} free — free space, choose another --store, or sweep "
                    f"fewer layers/sequences")
        if self.limit and self.limit.refusal(self.worker_bytes, self.worker_parts):
            return self.limit.refusal(self.worker_bytes, self.worker_parts)
        if self.local and self.workers * self.worker_bytes > self.memory_total:
            return (f"compute: {self.workers} worker(s) x {gib(self.worker_bytes)} peak exceeds this "
                    f"machine's {gib(self.memory_total)} of memory — use fewer --workers or a "
                    f"smaller compute.token_block")
        return None


def size_sweep(plan: Plan, workers: int | None = None, scheduler: str | None = None) -> Budget:
    """The cost of `plan` on `workers` workers; `scheduler` (an existing cluster's address)
    means the workers' memory is not this machine's."""
    cfg = plan.config
    kind = cfg.cluster.kind
    n = workers or cfg.cluster.workers or (os.cpu_count() or 1)
    process = process_term()
    rows, disk, peak, parts = [], 0, process.bytes, "the process"
    for m in plan.models:
        S, B = min(cfg.inputs.sequences, m.tokens.shape[0]), cfg.token_block   # a null: maybe fewer
        rows += [Row(m.name, m.spec.dtype, layer, tokens, S * math.ceil(tokens / B))
                 for layer, tokens in m.rows]
        disk += store_bytes(m, S * sum(tokens for _, tokens in m.rows), cfg)
        need, what = worker_bytes(m, cfg, process.bytes)
        if need > peak:
            peak, parts = need, what
    growth, left = _check_existing_store(plan)
    time = sweep_seconds(plan, n, left)           # a grown or resumed store: what is left of it
    gpu = time.on_one_gpu(sweep_seconds(plan, 1, left))
    study = getattr(cfg, "study", None)          # SweepConfig.study (the config engineer's)
    local = kind in ("local", "auto", "cuda") and not scheduler
    return Budget(tuple(rows), cfg.store, n, disk, du(Path(cfg.store)), free(Path(cfg.store)),
                  peak, parts, memory_total(), local, time,
                  worker_limit(cfg.cluster, local or (kind == "slurm" and not scheduler)), process,
                  growth, design(plan), proposals(plan, n), _family(study), gpu)


def _hours(seconds: float) -> str:
    return f"{seconds / 60:.3g} min" if seconds < 5400 else f"{seconds / 3600:.3g} h"


def _family(study) -> str:
    if study is None:
        return ""
    return (f"{len(study.tests())} declared tests (observable x layer x null kind), family-wise "
            f"level {study.level:g}, Holm")


def check_fits(budget: Budget) -> None:
    """ConfigError (one line, with the numbers) when the sweep cannot fit here."""
    why = budget.refusal()
    if why:
        raise ConfigError(why)


def _check_existing_store(plan: Plan) -> tuple[str, float]:
    """A store made from another config is refused here too (read-only), so --dry-run says
    what the real run would; a store the config grows, what it adds (else ""), and the share
    of the config's blocks still to compute (1 without a store)."""
    import zarr

    from sweep.store.grow import Growth
    from sweep.store.writer import check_same_config, group_ready

    meta = Path(plan.store) / "zarr.json"
    if not meta.is_file():
        return "", 1.0
    attrs = json.loads(meta.read_text()).get("attributes", {})
    check_same_config(attrs, plan)
    root = zarr.open_group(str(plan.store), mode="r")
    if not any(group_ready(root, n) for n in attrs.get("models", [])):
        return "", 1.0
    growth = Growth.of(root, plan)
    left = growth.todo / max(growth.todo + growth.kept, 1)
    return (growth.describe() if growth.added or growth.hidden else ""), left
