"""kind slurm against a real single-node SLURM (slurmctld + slurmd + munged on this machine).

tests/slurm/setup.sh brings SLURM up (installing slurm-wlm and munge with apt-get when they
are missing and we are root); where it cannot, every test here skips with its reason.
Each sweep's worker jobs are real `sbatch` jobs running `dask worker` from this venv.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from cluster.build import connect
from sweep.config.load import config_from_dict
from sweep.format.ledger import is_done, is_usable
from sweep.run import run_sweep
from sweep_helpers import (TOTAL, assert_equal_arrays, ledger, reference,  # noqa: F401 (fixture)
                           sweep_doc, wait_for_blocks)

REPO = Path(__file__).resolve().parents[1]
SETUP = REPO / "tests" / "slurm" / "setup.sh"


# the first test also installs SLURM when missing (apt-get), and a walltime test waits
# out a real 1-minute walltime
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """SLURM_CONF of a running single-node SLURM; stopped after the module."""
    where = tmp_path_factory.mktemp("slurm")
    try:
        up = subprocess.run(["bash", str(SETUP), "up", str(where)], capture_output=True,
                            text=True, timeout=900)
    except subprocess.TimeoutExpired:
        pytest.skip("SLURM bring-up took over 15 min")
    if up.returncode == 3:
        reason = up.stdout.strip().splitlines()[-1]
        print(f"\ntests/test_slurm.py skipped: {reason}", file=sys.stderr)
        pytest.skip(reason)
    assert up.returncode == 0, up.stdout + up.stderr
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(where / "slurm.conf")   # sbatch/squeue/scancel read it
    yield where
    subprocess.run(["bash", str(SETUP), "down", str(where)], timeout=60)
    if previous is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = previous


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)        # sbatch writes each job's slurm-<id>.out here
    return tmp_path


def _doc(ck, store, jobs=1, walltime="00:10:00") -> dict:
    cluster = {"kind": "slurm", "host": "127.0.0.1",
               "slurm": {"jobs": jobs, "cores": 1, "memory": "1GB", "walltime": walltime}}
    cluster["slurm"]["memory"] = _job_memory(sweep_doc(ck, store, cluster))
    return sweep_doc(ck, store, cluster)


def _job_memory(doc) -> str:
    """1GB per one-worker job where the budget says it holds a worker below Dask's pause
    threshold; else what the budget asks for (a worker's measured process differs by torch
    build: the CUDA build from PyPI takes ~280 MiB more than the CPU one), said once."""
    from sweep.budget import size_sweep
    from sweep.plan.make import make_plan

    cost = size_sweep(make_plan(config_from_dict(doc)))
    if cost.refusal() is None:
        return "1GB"
    need = -(-cost.worker_bytes // int(cost.limit.fraction * 2**20))        # MiB
    print(f"\ntests/test_slurm.py: 1GB per job cannot hold a worker here ({cost.refusal()}); "
          f"the jobs get {need}MiB", file=sys.stderr)
    return f"{need}MiB"


def _queue() -> list[str]:
    """Ids of every job SLURM still lists (pending, running, completing)."""
    out = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=True)
    return out.stdout.split()


def _wait_queue_empty(timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while _queue() and time.monotonic() < end:
        time.sleep(0.5)
    assert _queue() == [], f"jobs left in the queue: {_queue()}"


def _job_state(job_id: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True,
                         check=True).stdout
    return out.split("JobState=", 1)[1].split()[0]


def test_slurm_sweep_equals_local_and_leaves_no_jobs(slurm, in_tmp, tiny_checkpoints, reference):
    cfg = config_from_dict(_doc(tiny_checkpoints, in_tmp / "run.zarr", jobs=2))
    result = run_sweep(cfg, progress=False)                 # builds the SLURM cluster itself
    assert (result.exit_code, result.errors, result.done) == (0, [], TOTAL)
    jobs = sorted(in_tmp.glob("slurm-*.out"))
    assert len(jobs) == 2                                   # two sbatch jobs ran the workers
    assert_equal_arrays(cfg.store, reference)
    _wait_queue_empty()


def test_scancel_mid_sweep_then_rerun(slurm, in_tmp, tiny_checkpoints, reference):
    doc = _doc(tiny_checkpoints, in_tmp / "run.zarr")
    (in_tmp / "sweep.yaml").write_text(yaml.safe_dump(doc))
    log = open(in_tmp / "sweep.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "sweep", "sweep", "sweep.yaml"],
                            cwd=in_tmp, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_blocks(doc["store"], 3, timeout=600)
        first = _queue()
        subprocess.run(["scancel", *first], check=True)
        done_at_cancel = int(is_done(ledger(doc["store"])).sum())
        code = proc.wait(timeout=600)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    log.seek(0)
    text = log.read()
    assert done_at_cancel < TOTAL, "the sweep ended before scancel landed"
    assert code == 0, text
    assert f"sweep complete: {TOTAL}/{TOTAL} blocks" in text
    assert "(tdos page: http://127.0.0.1:" in text            # the dashboard page on SLURM too
    assert _job_state(first[0]) == "CANCELLED"
    assert len(list(in_tmp.glob("slurm-*.out"))) == 2       # the cancelled job and its replacement
    _wait_queue_empty()
    rerun = run_sweep(config_from_dict(doc), resume=True, progress=False)
    assert (rerun.exit_code, rerun.planned, rerun.done) == (0, 0, TOTAL)   # nothing lost, nothing redone
    assert is_usable(ledger(doc["store"])).all()
    assert_equal_arrays(doc["store"], reference)
    assert _queue() == []


def test_walltime_expiry_mid_sweep_moves_tasks_to_a_new_job(slurm, in_tmp, tiny_checkpoints,
                                                              reference):
    """The job's 1-minute walltime ends while sweep tasks wait on its only worker; they run
    on the job submitted in its place."""
    doc = _doc(tiny_checkpoints, in_tmp / "run.zarr", walltime="00:01:00")
    cfg = config_from_dict(doc)
    with connect(cfg.cluster) as client:
        out = {}
        sweep = threading.Thread(target=lambda: out.update(result=run_sweep(cfg, client=client,
                                                                            progress=False)))
        sweep.start()
        wait_for_blocks(cfg.store, 3, timeout=600)
        first = _queue()
        # another user's long task takes the worker's only thread until the walltime
        holder = client.submit(time.sleep, 600, priority=100, pure=False)
        while first[0] in _queue():
            assert sweep.is_alive(), "the sweep ended before the walltime"
            time.sleep(0.5)
        done_at_expiry = int(is_done(ledger(cfg.store)).sum())
        client.cancel(holder)
        sweep.join(timeout=600)
    result = out["result"]
    assert _job_state(first[0]) == "TIMEOUT"
    assert done_at_expiry < TOTAL
    assert (result.exit_code, result.errors, result.done) == (0, [], TOTAL)
    assert len(list(in_tmp.glob("slurm-*.out"))) >= 2
    assert_equal_arrays(cfg.store, reference)
    _wait_queue_empty()
