"""The one cluster builder, shared by the Python API (`connect`) and `tdos cluster up`.

kind      what starts                                   workers
local     distributed.LocalCluster, worker processes    one per core, 1 thread each
cuda      dask_cuda.LocalCUDACluster                    one per GPU, resources {"GPU": 1}
scheduler nothing: a Client to an existing scheduler    whatever is attached there
slurm     dask_jobqueue.SLURMCluster, `slurm.jobs` jobs  per job: one per GPU, else one per core
          (cluster/slurm.py; a job that leaves the queue early is replaced)
auto      cuda when GPUs and dask-cuda are present, else local

dask_cuda and dask_jobqueue are imported only when their kind is built: the default
install has neither requirement, and importing dask_cuda must not happen on CPU machines.
"""
from __future__ import annotations

import importlib.util
import os
from contextlib import contextmanager
from typing import Iterator

from distributed import Client, LocalCluster

from cluster.gpu import detect_gpus
from cluster.security import make_security
from cluster.config import ClusterConfig, ConfigError, check_address

LOOPBACK = "127.0.0.1"


def as_config(cfg: ClusterConfig | dict | None) -> ClusterConfig:
    if isinstance(cfg, ClusterConfig):
        return cfg
    return ClusterConfig.from_dict(cfg)


def resolve_kind(cfg: ClusterConfig) -> str:
    """`auto` → cuda when a GPU is visible and dask-cuda is importable, else local."""
    if cfg.kind != "auto":
        return cfg.kind
    if detect_gpus() > 0 and importlib.util.find_spec("dask_cuda") is not None:
        return "cuda"
    return "local"


def build_cluster(cfg: ClusterConfig | dict | None = None, n_workers: int | None = None):
    """Start the cluster `cfg` describes and return it (caller closes it)."""
    cfg = as_config(cfg)
    if n_workers is not None and (isinstance(n_workers, bool) or not isinstance(n_workers, int)
                                  or n_workers < 1):
        raise ConfigError(f"--workers: expected an integer >= 1, got {n_workers!r}")
    kind = resolve_kind(cfg)
    if kind == "local":
        return _local_cluster(cfg, n_workers)
    if kind == "cuda":
        return _cuda_cluster(cfg, n_workers)
    if kind == "slurm":
        from cluster.slurm import slurm_cluster

        return slurm_cluster(cfg, n_workers)
    raise ConfigError(f"{cfg.where}.kind: 'scheduler' attaches to a running cluster and builds "
                      f"none; use cluster.build.connect(cfg) or pick local, cuda or slurm")


@contextmanager
def connect(cfg: ClusterConfig | dict | None = None, n_workers: int | None = None,
            address: str | None = None) -> Iterator[Client]:
    """Yield a Client to the cluster `cfg` describes; close whatever was started here.

    `address` (the `--scheduler` flag) overrides the config: attach to that scheduler.
    """
    cfg = as_config(cfg)
    if address is not None:
        check_address(address, "--scheduler", cfg.tls)
        cfg = cfg.replace(kind="scheduler", address=address)
    if cfg.kind == "scheduler":
        security = make_security(cfg.tls)
        with Client(cfg.address, scheduler_file=None if cfg.address else cfg.scheduler_file,
                    security=security) as client:
            yield client
        return
    cluster = build_cluster(cfg, n_workers)
    try:
        with Client(cluster) as client:      # takes the cluster's Security
            yield client
    finally:
        cluster.close()


def dashboard_link(client: Client) -> str | None:
    """The scheduler's dashboard URL, or None when it serves none."""
    try:
        return client.dashboard_link
    except (KeyError, AttributeError):
        return None


def task_resources(cfg: ClusterConfig | dict | None = None,
                   client: Client | None = None) -> dict | None:
    """Resources each sweep task asks for: {"GPU": 1} on GPU clusters, so a task owns one GPU.

    For kind scheduler the config cannot tell; pass `client` to ask the workers themselves.
    """
    cfg = as_config(cfg)
    kind = resolve_kind(cfg)
    if kind == "cuda" or (kind == "slurm" and cfg.slurm.gpus > 0):
        return {"GPU": 1}
    if kind == "scheduler" and client is not None:
        workers = client.scheduler_info(n_workers=-1)["workers"].values()
        if workers and all(w.get("resources", {}).get("GPU") for w in workers):
            return {"GPU": 1}
    return None


def _local_workers(cfg: ClusterConfig, n_workers: int | None) -> int:
    if n_workers or cfg.workers:
        return n_workers or cfg.workers
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // cfg.threads_per_worker)


def _common_kwargs(cfg: ClusterConfig) -> dict:
    security = make_security(cfg.tls)
    kw = dict(host=cfg.host or LOOPBACK, dashboard_address=cfg.dashboard_address,
              protocol="tls://" if security else "tcp://", security=security,
              threads_per_worker=cfg.threads_per_worker)
    if cfg.memory_limit is not None:
        kw["memory_limit"] = cfg.memory_limit
    return kw


def _local_cluster(cfg: ClusterConfig, n_workers: int | None) -> LocalCluster:
    # processes, not threads: torch's eigensolvers hold the GIL in places, and one
    # single-threaded worker per core keeps BLAS from oversubscribing the machine
    return LocalCluster(n_workers=_local_workers(cfg, n_workers), processes=True,
                        scheduler_port=0, worker_dashboard_address=None, **_common_kwargs(cfg))


def _cuda_cluster(cfg: ClusterConfig, n_workers: int | None):
    # Untested on the development machine (no GPU there); kept to a direct call.
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError:
        raise ConfigError(f"{cfg.where}.kind: 'cuda' needs dask-cuda, which is not installed: "
                          f"pip install 'tdos[cuda]' (or use kind: local)") from None
    gpus = detect_gpus()
    if gpus == 0:
        raise ConfigError(f"{cfg.where}.kind: 'cuda' but no GPU is visible (nvidia-smi, "
                          f"CUDA_VISIBLE_DEVICES); use kind: local")
    return LocalCUDACluster(n_workers=n_workers or cfg.workers or gpus, scheduler_port=0,
                            resources={"GPU": 1}, **_common_kwargs(cfg))


def slurm_job_script(cfg: ClusterConfig | dict | None = None) -> str:
    """The sbatch script one worker job would run; submits nothing, starts no scheduler."""
    from cluster.slurm import slurm_job_script as script

    return script(as_config(cfg))
