"""Clusters for tdos sweeps: one builder (`cluster.build`) behind the API and `tdos cluster up`.

    from cluster import ClusterConfig, connect
    with connect(ClusterConfig.from_dict(yaml_doc.get("cluster"))) as client:
        ...

The cluster owns its config (cluster/config.py) and imports nothing of sweep; sweep imports
the cluster. Names load lazily (PEP 562): sweep's config loader imports cluster.config, and
reading a config must not import distributed. Importing this package imports neither
dask_cuda nor dask_jobqueue.
"""
import importlib

_EXPORTS = {
    "config": ["ClusterConfig", "ConfigError", "SlurmConfig", "TLSConfig"],
    "build": ["build_cluster", "connect", "dashboard_link", "resolve_kind", "slurm_job_script",
              "task_resources"],
    "gpu": ["detect_gpus"],
    "security": ["make_security"],
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name):
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'cluster' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
