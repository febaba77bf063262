"""A sweep on a cluster started with Dask's own CLI: `dask scheduler` and `dask worker`
processes with nothing tdos-specific on their command lines (free ports, scheduler file).
The workers import tdos as a user's would: it is installed in the environment they run in.
Also the dashboard's /tdos page, fetched over HTTP from that plain scheduler.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from distributed import Client

from sweep.config.load import config_from_dict
from sweep.run import run_sweep
from sweep_helpers import (TOTAL, assert_equal_arrays, reference, sweep_doc,  # noqa: F401 (fixture)
                           wait_for_blocks)

DASK = str(Path(sys.executable).with_name("dask"))


class DaskCLI:
    """`dask scheduler` + `dask worker` processes; every one is killed at the end."""

    def __init__(self, where: Path):
        self.where, self.procs = where, []
        self.file = where / "scheduler.json"

    def scheduler(self) -> dict:
        self._spawn([DASK, "scheduler", "--host", "127.0.0.1", "--port", "0",
                     "--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(self.file)])
        end = time.monotonic() + 60
        while not self.file.is_file() and time.monotonic() < end:
            time.sleep(0.1)
        return json.loads(self.file.read_text())

    def worker(self) -> subprocess.Popen:
        return self._spawn([DASK, "worker", "--scheduler-file", str(self.file), "--nthreads", "1",
                            "--nworkers", "1", "--no-dashboard"])

    def _spawn(self, argv) -> subprocess.Popen:
        log = open(self.where / f"proc{len(self.procs)}.log", "w")
        # own session: a kill takes the nanny and its worker process together, like a lost node
        p = subprocess.Popen(argv, cwd=self.where, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)


@pytest.fixture
def dask_cli(tmp_path):
    cli = DaskCLI(tmp_path)
    yield cli
    cli.close()


def _wait_workers(client: Client, n: int, timeout: float = 120) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        workers = client.scheduler_info(n_workers=-1)["workers"]
        if len(workers) == n:
            return workers
        time.sleep(0.1)
    raise AssertionError(f"{n} workers did not arrive in {timeout}s")


def _sweep_in_thread(cfg, address) -> tuple[threading.Thread, dict]:
    out = {}
    t = threading.Thread(target=lambda: out.update(
        result=run_sweep(cfg, scheduler=address, progress=False)))
    t.start()
    return t, out


def _once_each(result) -> Counter:
    counts = Counter((r["layer"], r["seq"], r["block"]) for r in result.results if "block" in r)
    assert len(counts) == TOTAL and set(counts.values()) == {1}
    return counts


def test_sweep_on_dask_cli_and_the_tdos_page(dask_cli, tiny_checkpoints, tmp_path, reference, capsys,
                                             monkeypatch):
    """Also: model.path relative to the client's working directory, while the `dask worker`
    processes run in another one (tmp_path): the plan resolves the path once and the workers
    load the directory it resolved to."""
    info = dask_cli.scheduler()
    dask_cli.worker(), dask_cli.worker()
    doc = sweep_doc(tiny_checkpoints, tmp_path / "run.zarr")
    monkeypatch.chdir(tiny_checkpoints["mamba"].parent)
    doc["model"]["path"] = tiny_checkpoints["mamba"].name
    assert not (tmp_path / doc["model"]["path"]).exists()      # nothing by that name where workers run
    cfg = config_from_dict(doc)
    with Client(info["address"]) as c:
        _wait_workers(c, 2)
    result = run_sweep(cfg, scheduler=info["address"], progress=False)
    assert (result.exit_code, result.errors, result.done) == (0, [], TOTAL)
    _once_each(result)
    assert_equal_arrays(cfg.store, reference)
    port = info["services"]["dashboard"]
    assert f"(tdos page: http://127.0.0.1:{port}/tdos)" in capsys.readouterr().out
    # the page outlives the sweep's client: the scheduler keeps the last snapshot
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/tdos", timeout=30).read().decode()
    assert str(tmp_path / "run.zarr") in page
    assert f"complete: {TOTAL}/{TOTAL} blocks" in page
    assert 'http-equiv="refresh"' not in page                 # ended: no more reloads
    doc = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/tdos.json").read())
    (sweep,) = doc["sweeps"]
    (model,) = sweep["models"]
    assert model["counts"] == {"done": TOTAL, "flagged": 0, "total": TOTAL}
    assert [(r["layer"], r["done"], r["total"]) for r in model["layers"]] == [(l, 64, 64) for l in range(3)]


def test_worker_killed_mid_sweep_costs_nothing(dask_cli, tiny_checkpoints, tmp_path, reference):
    info = dask_cli.scheduler()
    victim, _ = dask_cli.worker(), dask_cli.worker()
    cfg = config_from_dict(sweep_doc(tiny_checkpoints, tmp_path / "run.zarr"))
    with Client(info["address"]) as c:
        _wait_workers(c, 2)
        sweep, out = _sweep_in_thread(cfg, info["address"])
        done_at_kill = wait_for_blocks(cfg.store, 8)
        os.killpg(victim.pid, signal.SIGKILL)
        sweep.join(timeout=300)
        assert len(c.scheduler_info(n_workers=-1)["workers"]) == 1
    result = out["result"]
    assert done_at_kill < TOTAL                                # the kill landed mid-sweep
    assert (result.exit_code, result.errors, result.done) == (0, [], TOTAL)
    _once_each(result)
    assert_equal_arrays(cfg.store, reference)


def test_worker_added_mid_sweep_takes_tasks(dask_cli, tiny_checkpoints, tmp_path, reference):
    info = dask_cli.scheduler()
    dask_cli.worker()
    cfg = config_from_dict(sweep_doc(tiny_checkpoints, tmp_path / "run.zarr"))
    with Client(info["address"]) as c:
        first = set(_wait_workers(c, 1))
        sweep, out = _sweep_in_thread(cfg, info["address"])
        wait_for_blocks(cfg.store, 4)
        dask_cli.worker()
        (added,) = set(_wait_workers(c, 2)) - first
        added_pid = c.run(os.getpid, workers=[added])[added]
        sweep.join(timeout=300)
    result = out["result"]
    assert (result.exit_code, result.errors, result.done) == (0, [], TOTAL)
    _once_each(result)
    by_pid = Counter(r["pid"] for r in result.results if "block" in r)
    assert by_pid[added_pid] > 0, f"the added worker ran no block: {dict(by_pid)}"
    assert_equal_arrays(cfg.store, reference)
