"""kind slurm: a dask-jobqueue SLURMCluster whose lost jobs are replaced.

The scheduler runs in the process that builds the cluster (the `tdos sweep` client, or
`tdos cluster up` on a login node); every SLURM job runs `slurm.cores // threads` worker
processes (one per GPU when `slurm.gpus`). dask-jobqueue submits the jobs once; a job that
ends early (walltime, `scancel`, node failure) is not replaced by it. `_JobKeeper` polls
`squeue` and submits a fresh job for every one that left the queue, so the scheduler
reschedules the lost workers' tasks onto the new job's workers.

dask_jobqueue is imported only here, when kind slurm is built.
"""
from __future__ import annotations

import asyncio
import logging
import os

from cluster.security import make_security
from cluster.config import ClusterConfig, ConfigError

SCRIPT_SCHEDULER = "SCHEDULER-ADDRESS"   # stands in for the address in a dry-run job script
POLL_SECONDS = 5.0                       # squeue period; a lost job is replaced within it
FAILED_STARTS = 3                        # jobs in a row that ended before any worker arrived

log = logging.getLogger("tdos.cluster")


def slurm_job_kwargs(cfg: ClusterConfig) -> dict:
    """dask-jobqueue Job arguments for one SLURM job of `cfg.slurm`."""
    s = cfg.slurm
    directives, worker_args, prologue = list(s.job_extra_directives), [], []
    if s.gpus:
        # one worker process per GPU; the resource makes each task hold a whole GPU
        directives.insert(0, f"--gres=gpu:{s.gpus}")
        worker_args += ["--resources", "GPU=1"]
        if s.gpus > 1:
            worker_args += ["--preload", "cluster.pin_gpu"]
            prologue.append(f"export TDOS_JOB_GPUS={s.gpus}")
    return dict(queue=s.queue, account=s.account, walltime=s.walltime, cores=s.cores,
                memory=s.memory, processes=s.gpus or max(1, s.cores // cfg.threads_per_worker),
                job_extra_directives=directives, worker_extra_args=worker_args,
                job_script_prologue=prologue, local_directory=s.local_directory)


def slurm_job_script(cfg: ClusterConfig) -> str:
    """The sbatch script one worker job would run; submits nothing, starts no scheduler."""
    from dask_jobqueue import SLURMCluster

    security = make_security(cfg.tls)
    scheme = "tls" if security else "tcp"
    job = SLURMCluster.job_cls(scheduler=f"{scheme}://{SCRIPT_SCHEDULER}:8786", name="tdos-worker",
                               security=security, **slurm_job_kwargs(cfg))
    return job.job_script()


def scheduler_options(cfg: ClusterConfig) -> dict:
    """Where the scheduler listens. dask-jobqueue takes host and dashboard only through
    `scheduler_options` (passed directly they raise at once). host None leaves the
    scheduler on every interface: workers on other nodes must reach it."""
    options = {"dashboard_address": cfg.dashboard_address}
    if cfg.host is not None:
        options["host"] = cfg.host
    return options


def slurm_cluster(cfg: ClusterConfig, n_workers: int | None = None):
    """Start the scheduler here, submit `slurm.jobs` jobs (or enough for `n_workers`)."""
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        raise ConfigError(f"{cfg.where}.kind: 'slurm' needs dask-jobqueue: "
                          f"pip install 'tdos[slurm]'") from None
    security = make_security(cfg.tls)
    cluster = SLURMCluster(scheduler_options=scheduler_options(cfg), security=security,
                           protocol="tls://" if security else "tcp://", **slurm_job_kwargs(cfg))
    if n_workers:
        cluster.scale(n=n_workers)
    else:
        cluster.scale(jobs=cfg.slurm.jobs)
    _JobKeeper(cluster).start()
    return cluster


class _JobKeeper:
    """Replace the cluster's jobs that left the SLURM queue, on the cluster's event loop.

    A replacement gets a new spec name: distributed closes a lost worker's job by name
    `lost-worker-timeout` later, which must not hit the job that took its place.
    """

    def __init__(self, cluster):
        self.cluster = cluster
        self.seen: set[str] = set()          # job names that had a worker at the scheduler
        self.failed_in_a_row = 0

    def start(self) -> None:
        from tornado.ioloop import PeriodicCallback

        pc = PeriodicCallback(self.tick, POLL_SECONDS * 1000)
        # Cluster.close stops every periodic callback registered here
        self.cluster.periodic_callbacks["tdos-job-keeper"] = pc
        self.cluster.loop.add_callback(pc.start)

    async def tick(self) -> None:
        cluster = self.cluster
        jobs = {name: job for name, job in cluster.workers.items() if getattr(job, "job_id", None)}
        if not jobs or cluster.status.name in ("closing", "closed"):
            return
        self._note_arrivals(jobs)
        queued = await _queued_job_ids([job.job_id for job in jobs.values()])
        if queued is None:
            return                           # squeue failed this time: decide nothing
        lost = [name for name, job in jobs.items() if job.job_id not in queued]
        if lost:
            self._replace(lost, jobs)

    def _note_arrivals(self, jobs: dict) -> None:
        names = {str(ws.name) for ws in self.cluster.scheduler.workers.values()}
        for job_name in jobs:
            if any(n == job_name or n.startswith(f"{job_name}-") for n in names):
                self.seen.add(job_name)

    def _replace(self, lost: list[str], jobs: dict) -> None:
        cluster = self.cluster
        for name in lost:
            arrived = name in self.seen
            self.failed_in_a_row = 0 if arrived else self.failed_in_a_row + 1
            log.warning("SLURM job %s (%s) left the queue%s; submitting a replacement",
                        jobs[name].job_id, name, "" if arrived else " before any worker started")
            cluster.worker_spec.pop(name, None)
            cluster.workers.pop(name, None)
        if self.failed_in_a_row >= FAILED_STARTS:
            log.error("%d SLURM jobs in a row ended before a worker started; not submitting more "
                      "(see the jobs' slurm-<id>.out files)", self.failed_in_a_row)
            cluster.periodic_callbacks.pop("tdos-job-keeper").stop()
            return
        cluster.scale(jobs=len(cluster.worker_spec) + len(lost))   # new spec names, new jobs


async def _queued_job_ids(job_ids: list[str]) -> set[str] | None:
    """Ids among `job_ids` that squeue still lists (pending, running or completing)."""
    proc = await asyncio.create_subprocess_exec(
        "squeue", "-h", "-o", "%i", "-j", ",".join(job_ids),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=os.environ.copy())
    out, err = await proc.communicate()
    if proc.returncode != 0:
        # squeue -j with only finished ids says "Invalid job id specified" and exits 1
        return set() if b"Invalid job id" in err else None
    return {line.strip() for line in out.decode().split()}
