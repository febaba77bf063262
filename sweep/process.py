"""The memory a worker process holds before any model or block: measured, once per environment.

A worker's resident memory before its first model is mostly the libraries it imports, and
that differs by build far more than by anything in a config: torch 2.13.0+cpu takes 219 MiB
after `import torch`, the CUDA build from PyPI 497 MiB (issue 45). So the budget's process
term is the resident set size (RSS) of a fresh Dask worker process (one of a one-worker
LocalCluster, started by a subprocess) after it has imported what a worker's tasks import
(PROBE: the task module, the layer-local route, transformers' modeling code, one eig and
one backward, which load LAPACK and start autograd). A real worker, not a bare interpreter:
the same imports take 58 MiB more inside a worker (379 against 325 MiB with torch
2.13.0+cpu), so only a worker measures a worker. Measured the first time (about 10 s) and
cached beside the checkpoint hashes, `process-memory.json` in tdos' cache directory
(`$TDOS_CACHE`, default `$XDG_CACHE_HOME/tdos`, else `~/.cache/tdos`), keyed by everything
that decides it: torch (version and build), transformers, distributed, Python, the
machine's architecture and the probe itself.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sweep.checkpoints.hashes import cache_dir

CACHE_NAME = "process-memory.json"
ASSUMED_BYTES = 1 << 29          # 0.5 GiB: the figure used when the probe cannot run
PROBE = """
import distributed


def imports():
    import psutil, torch
    import sweep.worker.task, sweep.worker.resident, transformers.modeling_utils
    torch.linalg.eig(torch.randn(64, 64, dtype=torch.float64))
    x = torch.randn(64, requires_grad=True)
    (x * x).sum().backward()
    return psutil.Process().memory_info().rss


with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, scheduler_port=0,
                              dashboard_address=":0") as cluster, distributed.Client(cluster) as c:
    print(c.submit(imports, pure=False).result())
"""


@dataclass(frozen=True)
class ProcessTerm:
    bytes: int                   # resident memory of one worker process, no model
    source: str                  # how it was obtained, for the dry run

    def describe(self) -> str:
        return f"{self.bytes / (1 << 20):.0f} MiB, {self.source}"


def environment_key() -> str:
    """What decides a worker's import footprint, as one string (the cache's key)."""
    from importlib.metadata import version

    probe = hashlib.sha256(PROBE.encode()).hexdigest()[:12]
    names = ("torch", "transformers", "distributed")
    return " ".join([*(f"{n}={version(n)}" for n in names),
                     f"python={platform.python_version()}", f"machine={platform.machine()}",
                     f"probe={probe}"])


def cache_file() -> Path:
    return cache_dir() / CACHE_NAME


def process_term() -> ProcessTerm:
    """The measured process term for this environment: from the cache when it holds this
    environment's key, else measured now (a few seconds) and written there."""
    return _process_term(cache_file(), environment_key())


@functools.cache                 # once per process, cache file and environment
def _process_term(cache: Path, key: str) -> ProcessTerm:
    known = _read(cache)
    if isinstance(known.get(key), int):
        return ProcessTerm(known[key], f"measured once for {key.split(' python=')[0]} "
                                       f"(cached in {cache})")
    try:
        rss = measure()
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        return ProcessTerm(ASSUMED_BYTES, f"assumed: the probe failed ({type(e).__name__}: "
                                          f"{str(e).strip()[-200:]})")
    _write(cache, {**known, key: rss})
    return ProcessTerm(rss, f"measured now for {key.split(' python=')[0]} (cached in {cache})")


def measure() -> int:
    """RSS in bytes of a fresh worker process after PROBE's imports (this interpreter, this
    import path, the Dask config in force)."""
    here = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (here, os.environ.get("PYTHONPATH")) if p)}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         env=env, timeout=300)
    if out.returncode != 0:
        raise ValueError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else
                         f"exit status {out.returncode}")
    return int(out.stdout.split()[-1])


def _read(cache: Path) -> dict:
    try:
        data = json.loads(cache.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(cache: Path, data: dict) -> None:
    """Best effort: an unwritable cache only means measuring again next time. Written to a
    temporary file and renamed, so a reader never sees half a file."""
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, cache)
    except OSError:
        pass
