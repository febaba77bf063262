"""Clusters for tdos sweeps: one builder behind the API and `tdos cluster up`.

    config.py   ClusterConfig, SlurmConfig, TLSConfig: the `cluster:` section, and its ConfigError
    build.py    connect, build_cluster, resolve_kind, task_resources, dashboard_link
    cli.py      `tdos cluster up`, a thin door to build.py
    slurm.py, security.py, gpu.py, pin_gpu.py, dashboard.py, page.py

    from cluster.build import connect
    from cluster.config import ClusterConfig
    with connect(ClusterConfig.from_dict(yaml_doc.get("cluster"))) as client:
        ...

The cluster owns its config and imports nothing of sweep; sweep imports the cluster. This
file imports nothing: sweep's config loader reads cluster.config, and reading a config must
not import distributed. Building a cluster imports neither dask_cuda nor dask_jobqueue
unless its kind needs them.
"""
