"""`tdos cluster up`: the command-line door to `cluster.build` (no cluster logic here).

Flags override the `cluster:` section of --config (a sweep YAML), which overrides defaults.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from cluster.build import build_cluster, resolve_kind, slurm_job_script
from cluster.config import ClusterConfig, ConfigError, SlurmConfig, TLSConfig


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tdos cluster up",
                                description="Start a cluster, print its address, run until Ctrl-C.")
    p.add_argument("--config", help="sweep YAML whose `cluster:` section is the starting point")
    p.add_argument("--kind", choices=["local", "cuda", "slurm", "auto"])
    p.add_argument("--workers", type=int, help="worker processes (local: one per core, cuda: one per GPU)")
    p.add_argument("--threads-per-worker", type=int)
    p.add_argument("--memory-limit", help="per worker, e.g. 4GB")
    p.add_argument("--host", help="interface to bind (default 127.0.0.1 for local/cuda)")
    p.add_argument("--dashboard-address", help="default 127.0.0.1:0 (a free port on loopback)")
    p.add_argument("--scheduler-file", help="write the scheduler's address here (JSON) for kind: scheduler")
    p.add_argument("--tls-ca-file")
    p.add_argument("--tls-cert")
    p.add_argument("--tls-key")
    p.add_argument("--dry-run", action="store_true",
                   help="print what would start (slurm: the job script) and exit")
    s = p.add_argument_group("slurm (kind slurm)")
    s.add_argument("--slurm-queue")
    s.add_argument("--slurm-account")
    s.add_argument("--slurm-walltime", help="HH:MM:SS per job")
    s.add_argument("--slurm-jobs", type=int)
    s.add_argument("--slurm-cores", type=int, help="cores per job")
    s.add_argument("--slurm-memory", help="memory per job, e.g. 16GB")
    s.add_argument("--slurm-gpus", type=int, help="GPUs per job (one worker each)")
    s.add_argument("--slurm-job-extra", action="append", dest="slurm_job_extra_directives",
                   help="extra #SBATCH directive, repeatable, e.g. --slurm-job-extra=--qos=high")
    s.add_argument("--slurm-local-directory")
    return p


def config_from_args(args: argparse.Namespace) -> ClusterConfig:
    base = ClusterConfig.from_dict(_yaml_cluster_section(args.config), where="cluster")
    slurm = {k[len("slurm_"):]: v for k, v in vars(args).items() if k.startswith("slurm_")}
    tls = {"ca_file": args.tls_ca_file, "cert": args.tls_cert, "key": args.tls_key}
    slurm = _override(base.slurm, SlurmConfig, slurm)
    tls = _override(base.tls, TLSConfig, tls)
    return base.replace(kind=args.kind, workers=args.workers,
                        threads_per_worker=args.threads_per_worker, memory_limit=args.memory_limit,
                        host=args.host, dashboard_address=args.dashboard_address, tls=tls, slurm=slurm)


def up(argv: list[str] | None = None) -> int:
    """Entry point of `tdos cluster up`; returns the exit status."""
    args = parser().parse_args(argv)
    try:
        cfg = config_from_args(args)
        kind = resolve_kind(cfg)
        if args.dry_run:
            return _dry_run(cfg, kind)
        cluster = build_cluster(cfg)
    except ConfigError as e:
        print(f"tdos cluster up: {e}", file=sys.stderr)
        return 2
    return _serve(cluster, kind, args.scheduler_file)


def _serve(cluster, kind: str, scheduler_file: str | None) -> int:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        if scheduler_file:
            _write_scheduler_file(cluster, scheduler_file)
        address = cluster.scheduler_address
        unit = "SLURM job(s) submitted" if kind == "slurm" else "worker(s)"
        print(f"tdos cluster up: {kind} cluster, {len(cluster.workers)} {unit}", flush=True)
        print(f"scheduler: {address}", flush=True)
        link = cluster.dashboard_link
        print(f"dashboard: {link or 'none'}", flush=True)
        if link:
            print(f"tdos page (once a sweep runs): {link.rsplit('/', 1)[0]}/tdos", flush=True)
        if scheduler_file:
            print(f"scheduler file: {scheduler_file}", flush=True)
        print(f"run a sweep on it:\n  tdos sweep CONFIG.yaml --scheduler {address}", flush=True)
        print("Ctrl-C to stop.", flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        cluster.close()
        if scheduler_file and os.path.exists(scheduler_file):
            os.remove(scheduler_file)   # a stale file would point the next sweep at nothing
    print("tdos cluster up: stopped", flush=True)
    return 0


def _dry_run(cfg: ClusterConfig, kind: str) -> int:
    if kind == "slurm":
        print("# job script for each of the", cfg.slurm.jobs, "SLURM job(s); the scheduler "
              "address is filled in at start", file=sys.stderr)
        print(slurm_job_script(cfg))
    else:
        print(f"would start a {kind} cluster: {cfg}")
    return 0


def _write_scheduler_file(cluster, path: str) -> None:
    from distributed import Client

    with Client(cluster) as client:
        client.write_scheduler_file(path)


def _override(section, cls, flags: dict):
    changes = {k: v for k, v in flags.items() if v is not None}
    if not changes:
        return section
    values = {f: getattr(section, f) for f in cls.__dataclass_fields__ if f != "where"}
    return cls(**{**values, **changes}, where=section.where)


def _yaml_cluster_section(path: str | None) -> dict | None:
    if path is None:
        return None
    import yaml

    with open(path) as f:
        doc = yaml.safe_load(f) or {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a YAML mapping with a `cluster:` section")
    return doc.get("cluster")


def main(argv: list[str] | None = None) -> int:
    """`python -m cluster up ...`, the same command without the tdos front end."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != "up":
        print("usage: python -m cluster up [options]   (see --help)", file=sys.stderr)
        return 2
    return up(argv[1:])
