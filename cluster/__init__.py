"""Clusters for tdos sweeps: one builder (`cluster.build`) behind the API and `tdos cluster up`.

    from cluster import ClusterConfig, connect
    with connect(ClusterConfig.from_dict(yaml_doc.get("cluster"))) as client:
        ...

Importing this package imports neither dask_cuda nor dask_jobqueue.
"""
from cluster.build import (build_cluster, connect, dashboard_link, resolve_kind, slurm_job_script,
                           task_resources)
from cluster.gpu import detect_gpus
from cluster.security import make_security
from sweep.config.cluster import ClusterConfig, ConfigError, SlurmConfig, TLSConfig

__all__ = [
    "ClusterConfig", "ConfigError", "SlurmConfig", "TLSConfig",
    "build_cluster", "connect", "dashboard_link", "detect_gpus", "make_security",
    "resolve_kind", "slurm_job_script", "task_resources",
]
