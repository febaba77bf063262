"""The client's watch over its workers: a worker paused for memory, or a cluster without
workers, is named instead of leaving the progress bar still.

Dask pauses a worker whose process memory passes `distributed.worker.memory.pause` x its
memory_limit: it keeps its tasks but starts none, and says so only in its own log. Each
`check()` (the sweep's loop calls it about once a second while no task completes) reads
every worker's status, memory and limit from the scheduler. A worker paused for longer than
`compute.stall_after` gets one line (which worker, its memory, its limit, what it was
running); when every worker is paused that long, or none has been attached for that long
and none is coming (no SLURM job left in the cluster's queue), no block can progress and
`check()` raises `Stalled` with that line.
"""
from __future__ import annotations

import time
from typing import Callable

MiB = 1 << 20


class Stalled(Exception):
    """No block can progress; the message is the one line that says why."""


class StallWatch:
    def __init__(self, client, stall_after: float, running: Callable[[str], str],
                 say: Callable[[str], None]):
        """`running(key)` describes the task of a future's key; `say` prints one line."""
        self.client, self.after, self.running, self.say = client, stall_after, running, say
        self.paused_since: dict[str, float] = {}
        self.named: set[str] = set()
        self.empty_since: float | None = None
        self.waiting_said = False

    def check(self) -> None:
        now = time.monotonic()
        workers = self.client.scheduler_info(n_workers=-1).get("workers", {})
        if not workers:
            self._no_workers(now)
            return
        self.empty_since = None
        for addr, w in workers.items():
            if w.get("status") == "paused":
                self.paused_since.setdefault(addr, now)
            else:
                self.paused_since.pop(addr, None)
                self.named.discard(addr)
        stuck = {a for a, t in self.paused_since.items() if a in workers and now - t >= self.after}
        if not stuck:
            return
        doing = self._processing()
        lines = {a: self._line(a, workers[a], doing.get(a, []), now) for a in stuck}
        if stuck == set(workers):
            raise Stalled("every worker is paused for memory, so no block can progress: "
                          + "; ".join(lines[a] for a in sorted(lines)))
        for a in sorted(stuck - self.named):
            self.named.add(a)
            self.say(lines[a])

    def _line(self, addr: str, w: dict, keys: list, now: float) -> str:
        memory = w.get("metrics", {}).get("memory", 0)
        limit = w.get("memory_limit") or 0
        what = ", ".join(sorted({self.running(k) for k in keys})) or "no task of this sweep"
        return (f"worker {w.get('name', addr)} ({addr}) paused for memory for "
                f"{now - self.paused_since[addr]:.0f} s (compute.stall_after {self.after:g} s): "
                f"process {memory / MiB:.0f} MiB of its {limit / MiB:.0f} MiB limit, running "
                f"{what} — give workers more memory (cluster.memory_limit, cluster.slurm.memory) "
                f"or fewer tokens per task (compute.token_block)")

    def _processing(self) -> dict:
        try:
            return self.client.processing()
        except (OSError, TimeoutError):
            return {}

    def _no_workers(self, now: float) -> None:
        self.empty_since = self.empty_since if self.empty_since is not None else now
        waited = now - self.empty_since
        if waited < self.after:
            return
        jobs = len(getattr(getattr(self.client, "cluster", None), "worker_spec", None) or {})
        address = self.client.scheduler.address
        if jobs:                               # workers are coming: a queue may be slow
            if not self.waiting_said:
                self.waiting_said = True
                self.say(f"no worker has joined {address} for {waited:.0f} s; {jobs} worker "
                         f"job(s) of this cluster are still queued or starting — waiting")
            return
        raise Stalled(f"no worker attached to the scheduler at {address} for {waited:.0f} s "
                      f"(compute.stall_after {self.after:g} s), and none is queued — start "
                      f"workers (`dask worker {address}`) or check the cluster's queue")
