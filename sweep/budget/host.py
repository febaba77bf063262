"""What the machine offers a sweep: Dask's memory limit per worker and the threshold it acts
on, the disk the store lands on, this machine's memory; and the store's own size.

Memory is held against the threshold Dask acts on, not the raw limit: a worker whose
process memory passes `distributed.worker.memory.pause` x memory_limit (0.8 by default)
stops taking tasks, and one past `terminate` (0.95) is killed. tdos' tasks keep almost
nothing in Dask's managed memory (each returns a small dict), so `target` and `spill`,
which only move managed data to disk, free nothing here: the binding fraction is pause
(terminate where pause is switched off), read from the Dask config in force (`WorkerLimit`).
"""
from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from sweep.budget.memory import GiB, MiB, gib
from sweep.format import dtypes


@dataclass(frozen=True)
class WorkerLimit:
    """One worker's Dask memory_limit, where it comes from, and the fraction of it at which
    Dask stops the worker (the Dask config in force: pause, else terminate)."""
    bytes: int
    field: str                      # the config field that sets it, for the fix
    how: str                        # how bytes follows from that field
    fraction: float                 # of bytes, where Dask pauses (or kills) the worker
    threshold: str                  # which Dask setting gives `fraction`
    per_field: int = 1              # workers sharing the field's amount (a SLURM job's)

    @property
    def usable(self) -> int:
        return int(self.fraction * self.bytes)

    def refusal(self, need: int, parts: str) -> str | None:
        if need <= self.usable:
            return None
        raise_to = math.ceil(need / self.fraction * self.per_field)
        return (f"{self.field}: {gib(self.bytes)} per worker ({self.how}) is below what one "
                f"worker needs: Dask stops a worker at {self.fraction:.0%} of its limit "
                f"({self.threshold}), {gib(self.usable)}, and one holds up to {gib(need)} "
                f"({parts}) — raise {self.field.split('.')[-1]} to at least {gib(raise_to)}, "
                f"or sweep in float32 / with a smaller compute.token_block")

    def line(self) -> str:
        return (f"Dask's limit per worker {gib(self.bytes)} ({self.how}); it stops a worker at "
                f"{self.fraction:.0%} of it ({self.threshold}): {gib(self.usable)}")


def worker_limit(cluster, known: bool) -> WorkerLimit | None:
    """Dask's memory_limit of one worker of `cluster` (a ClusterConfig), where the budget can
    tell (`known`: a cluster tdos builds): cluster.memory_limit; else on SLURM the job's
    memory shared by its worker processes; else distributed's "auto" share of this machine
    (its memory x threads per worker / cores). None for an existing scheduler's workers, or
    when the Dask config disables both pause and terminate."""
    import logging

    import dask
    from dask.utils import parse_bytes
    from distributed.worker_memory import parse_memory_limit

    if not known:
        return None
    limit = cluster.memory_limit
    if cluster.kind == "slurm" and limit in (None, "auto"):
        from cluster.slurm import slurm_job_kwargs

        per_job = slurm_job_kwargs(cluster)["processes"]
        field, how = "cluster.slurm.memory", f"{cluster.slurm.memory} per job / {per_job} worker(s)"
        total = int(parse_bytes(cluster.slurm.memory)) // per_job
    elif limit in (None, "auto"):
        per_job, field = 1, "cluster.memory_limit"
        how = f"auto: this machine's memory x {cluster.threads_per_worker} thread(s) / cores"
    else:
        per_job, field, how = 1, "cluster.memory_limit", f"memory_limit {limit}"
    if field == "cluster.memory_limit":     # what distributed's own workers make of it
        total = parse_memory_limit(limit or "auto", cluster.threads_per_worker,
                                   logger=logging.getLogger("tdos.budget"))
    if not total or total <= 0:              # distributed's "no limit"
        return None
    for name in ("pause", "terminate"):
        fraction = dask.config.get(f"distributed.worker.memory.{name}")
        if fraction:
            return WorkerLimit(total, field, how, float(fraction),
                               f"distributed.worker.memory.{name} = {fraction}", per_job)
    return None


def store_bytes(m, planned: int, cfg) -> int:
    """Bytes of the arrays a finished sweep writes for model `m` (chunks never written,
    beyond each layer's length, take no space)."""
    dt = dtypes.row(m.spec.dtype)
    real, info = dt.bytes, m.info
    per_token = info.d_model * dt.complex_bytes + 4 * real  # eigenvalues + scale/shift ρ, r
    channels = max((k.delta_channels for k in info.kinds if k.ssm), default=0)
    per_token += channels * real                            # Δ_t
    a_log = sum(math.prod(k.a_log_shape) for k in info.kinds if k.ssm) * real
    tokens = cfg.inputs.sequences * cfg.inputs.length * 8   # the int64 token ids
    stacks = 0
    if m.depth_spans:                 # per span and start: eig(P), its σ, gain, ρ and r along 𝟙;
        n = len(m.rows)               # per token: γ and the QR diagnostic
        starts = sum(n - s + 1 for s in m.depth_spans)
        swept = cfg.inputs.sequences * m.rows[0][1]
        stacks = swept * (starts * (info.d_model * 3 + 3) + 2 * info.d_model) * real
    memory = 0
    if cfg.memory is not None:        # m_t(k) and its standard error: (layer, seq, L, K+1) each
        memory = 2 * len(m.rows) * cfg.inputs.sequences * cfg.inputs.length * (cfg.memory.lags + 1) * real
    return planned * per_token + a_log + tokens + stacks + memory


def du(p: Path) -> int:
    """Bytes of the files under `p` (0 when there is none)."""
    try:
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else 0
    except OSError:
        return 0


def free(p: Path) -> int:
    """Free bytes on the disk `p` (or its nearest existing parent) would be written to."""
    while not p.exists():
        p = p.parent
    return shutil.disk_usage(p).free


def memory_total() -> int:
    """Physical memory of this machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def size(n: int) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"
