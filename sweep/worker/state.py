"""What a worker process keeps between tasks, in one object: `WorkerState`.

A Dask worker runs many tasks in one process, so it keeps what is costly to make again: the
model it holds (the whole model, or one layer at a time: never both, one checkpoint at a
time), the route each checkpoint takes on this worker, the store's open arrays, each thread's
J_tt buffer, the malloc tuning and the software record. Everything is in one object so that
what drops one model drops the other in one place, and so that its lifetime is the worker's:
one per Dask worker (sweep/worker/plugin.py). Code that calls `run_task` in its own process
(tests, benchmarks) owns a WorkerState and passes it in.

The worker outlives any one sweep (`tdos cluster up`, `--scheduler`), so every cache here is
keyed by what decides its content, never by a path alone (sweep/worker/task.py).
"""
from __future__ import annotations

import ctypes
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import torch

from sweep.plan import provenance
from sweep.store import writer as store
from sweep.tasks import ModelRef
from sweep.worker import route
from sweep.worker.resident import Resident

ARRAY_CACHE = 8            # open store groups kept per worker (metadata is read once)
MMAP_THRESHOLD = 32 << 20  # bytes: glibc's largest; smaller temporaries come from the heap
TRIM_THRESHOLD = 256 << 20  # bytes of freed heap kept for the next block instead of trimmed


@dataclass(eq=False)
class WorkerState:
    """One worker process's state (one per Dask worker, or one per in-process caller)."""

    whole: object = None           # sweep.worker.held.Whole: the whole model held, or None
    resident: Resident = field(default_factory=Resident)     # the layer-local model held
    fallback: dict[tuple, str] = field(default_factory=dict)  # sweep/worker/route.py
    open_arrays: OrderedDict = field(default_factory=OrderedDict)  # store key -> {name: array}
    threads: threading.local = field(default_factory=threading.local)   # J_tt buffer per thread
    malloc_tuned: bool = False
    software_record: dict | None = None

    def arrays(self, ref: ModelRef, need: str | None = None) -> dict:
        """{name: zarr.Array} of the task's model group, opened once per worker and store (again
        when array `need` is missing: arrays added since, as `memory:` adds to a finished store).
        Keyed by the store's identity (fingerprint + creation id: a store deleted and swept
        again at the same path is another store) and the group's extent (a grown group's
        arrays have other shapes)."""
        key = (ref.store, ref.group, ref.fingerprint, ref.store_id, ref.extent)
        cache = self.open_arrays
        if key not in cache or (need is not None and need not in cache[key]):
            g = store.open_group(ref.store, ref.group)
            cache[key] = {name: g[name] for name in g.array_keys()}
            while len(cache) > ARRAY_CACHE:
                cache.popitem(last=False)
        return cache[key]

    def jacobian_buffer(self, T: int, d: int, dtype, device) -> torch.Tensor:
        """(T, d, d) of `dtype` on `device`, reused by this thread's tasks.

        A block's J_tt is 32-256 MiB (d = 1024, 8-32 tokens): above glibc's largest mmap
        threshold, so a fresh one is mapped and page-faulted anew by every task (a fresh 32 MiB
        block costs 45 ms to fill vs 4 ms reused on the development VM). Per thread: a worker
        with several threads runs several tasks at once.
        """
        mine = self.threads
        buf = getattr(mine, "jac", None)
        if buf is None or buf.numel() < T * d * d or buf.dtype != dtype or buf.device != device:
            mine.jac = buf = None                                 # drop the old one first
            mine.jac = buf = torch.empty(T * d * d, dtype=dtype, device=device)
        return buf[: T * d * d].view(T, d, d)

    def keep_temporaries_on_heap(self) -> None:
        """glibc only, once per worker: serve the block math's MiB-sized temporaries from the heap.

        Dask starts workers with MALLOC_TRIM_THRESHOLD_=65536, which pins glibc's mmap threshold
        at 128 KiB: every larger temporary (a (d, d) J_tt is 4 MiB at d = 1024, an MLP's
        (d_ff, d) factor 16 MiB) is then a fresh mapping whose pages fault on first touch,
        ~5 us per 4 KiB page on the development VM: 36k faults per GPT-2-medium token, ~30% of
        its J_tt (benchmarks/README.md). 32 MiB is glibc's largest mmap threshold; freed heap
        up to 256 MiB is kept for the next block instead of being trimmed.
        """
        if self.malloc_tuned:
            return
        self.malloc_tuned = True
        mallopt = getattr(ctypes.CDLL(None), "mallopt", None)   # the process's own libc symbols
        if mallopt is None:
            return
        m_trim_threshold, m_mmap_threshold = -1, -3            # glibc malloc.h
        mallopt(m_mmap_threshold, MMAP_THRESHOLD)
        mallopt(m_trim_threshold, TRIM_THRESHOLD)

    def software(self) -> dict:
        """This worker's provenance.software(), read once."""
        if self.software_record is None:
            self.software_record = provenance.software()
        return self.software_record

    def fields(self, ref: ModelRef, since: tuple[int, int]) -> dict:
        """What every block, walk and memory result says of the worker: the pid, route,
        software, and the decoder layers and bytes read from the checkpoint (layer-local) since
        the resident counters stood at `since`."""
        loads, read = since
        now = self.resident.counters()
        return {"pid": os.getpid(), "route": route.name(ref), "software": self.software(),
                "layer_loads": max(0, now[0] - loads), "read_bytes": max(0, now[1] - read)}
