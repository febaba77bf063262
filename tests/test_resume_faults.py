"""Faults: a worker killed with SIGKILL mid-sweep, and the whole `tdos sweep` interrupted
with SIGINT then rerun. Both end with every block computed once into the store and the
same eigenvalues as an uninterrupted run."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml
import zarr

from sweep.config.load import config_from_dict
from sweep.format.ledger import is_done, is_usable
from sweep.plan.make import make_plan
from sweep.run import run_sweep
from sweep.store.writer import open_store

REPO = Path(__file__).resolve().parents[1]
NAME = "mamba"
# 3 layers x 4 sequences x 16 one-token blocks: enough tasks that a run is caught midway
TOTAL = 3 * 4 * 16


def _doc(ck, store) -> dict:
    return {"model": {"path": str(ck["mamba"])}, "inputs": {"sequences": 4, "length": 16, "seed": 1},
            "layers": "all", "store": str(store), "compute": {"token_block": 1, "live_every": 0}}


@pytest.fixture(scope="module")
def reference(tiny_checkpoints, tmp_path_factory, client):
    """Arrays of an uninterrupted run of the same config."""
    cfg = config_from_dict(_doc(tiny_checkpoints, tmp_path_factory.mktemp("ref") / "run.zarr"))
    result = run_sweep(cfg, client=client, progress=False)
    assert result.exit_code == 0 and result.done == TOTAL
    return _arrays(cfg.store)


def _arrays(store) -> dict:
    g = zarr.open_group(str(store), path=NAME, mode="r")
    return {k: g[k][...] for k in ("eigenvalues", "delta", "a_log", "tokens")}


def _ledger(store) -> np.ndarray:
    return zarr.open_group(str(store), path=NAME, mode="r")["ledger"][...]      # (R, S, nb)


def _wait_for_blocks(store, n: int, timeout: float = 300, proc=None, log=None) -> int:
    """Poll the ledger until at least n blocks are done; returns how many were. With `proc`,
    a sweep process that exits first fails the wait at once, with its output."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if (Path(store) / NAME / "ledger" / "zarr.json").is_file():
            done = int(is_done(_ledger(store)).sum())
            if done >= n:
                return done
        if proc is not None and proc.poll() is not None:
            log.seek(0)
            raise AssertionError(f"tdos sweep exited ({proc.returncode}) early:\n{log.read()}")
        time.sleep(0.02)
    raise AssertionError(f"fewer than {n} blocks landed in {timeout}s")


def _wait_workers_idle(client, settle: float = 0.5) -> None:
    """Tasks of a departed client may still be running on a worker: wait them out."""
    end = time.monotonic() + 60
    while time.monotonic() < end:
        busy = client.run(lambda dask_worker: len(dask_worker.active_threads))
        if not any(busy.values()):
            time.sleep(settle)
            if not any(client.run(lambda dask_worker: len(dask_worker.active_threads)).values()):
                return
        time.sleep(0.1)
    raise AssertionError("workers still busy after 60s")


def _block_counts(result) -> Counter:
    return Counter((r["layer"], r["seq"], r["block"]) for r in result.results if "block" in r)


def _assert_equal_to_reference(store, reference) -> None:
    got = _arrays(store)
    for k, want in reference.items():
        np.testing.assert_array_equal(got[k], want, err_msg=k)


def test_killed_worker_tasks_rerun(tiny_checkpoints, tmp_path, client, reference):
    cfg = config_from_dict(_doc(tiny_checkpoints, tmp_path / "run.zarr"))
    open_store(make_plan(cfg))
    victim = sorted(client.run(os.getpid).items())[0][1]
    out = {}
    sweep = threading.Thread(target=lambda: out.update(result=run_sweep(cfg, client=client, progress=False)))
    sweep.start()
    done_at_kill = _wait_for_blocks(cfg.store, 8)
    os.kill(victim, signal.SIGKILL)
    sweep.join(timeout=300)
    result = out["result"]
    assert done_at_kill < TOTAL                     # the kill landed mid-sweep
    assert (result.exit_code, result.errors, result.done) == (0, [], TOTAL)
    counts = _block_counts(result)
    assert len(counts) == TOTAL and set(counts.values()) == {1}
    assert victim not in client.run(os.getpid).values()
    assert is_usable(_ledger(cfg.store)).all()
    _assert_equal_to_reference(cfg.store, reference)


def test_interrupted_run_resumes_only_unfinished(tiny_checkpoints, tmp_path, client, reference):
    cfg_path = tmp_path / "sweep.yaml"
    cfg_path.write_text(yaml.safe_dump(_doc(tiny_checkpoints, tmp_path / "run.zarr")))
    cfg = config_from_dict(_doc(tiny_checkpoints, tmp_path / "run.zarr"))
    log = open(tmp_path / "sweep.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "sweep", "sweep", str(cfg_path),
                             "--scheduler", client.scheduler.address],
                            cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for_blocks(cfg.store, 5, proc=proc, log=log)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 130
    finally:
        proc.kill()
    log.seek(0)
    assert "sweep interrupted: " in log.read()
    _wait_workers_idle(client)
    before = _ledger(cfg.store)
    assert 0 < np.count_nonzero(before) < TOTAL
    result = run_sweep(cfg, client=client, progress=False, resume=True)
    assert (result.exit_code, result.errors, result.planned) == (0, [], TOTAL - np.count_nonzero(before))
    counts = _block_counts(result)
    assert set(counts.values()) == {1}
    assert sorted(counts) == sorted(zip(*map(list, np.nonzero(before == 0))))
    _assert_equal_to_reference(cfg.store, reference)


def test_second_sweep_of_a_store_stops_and_a_crashed_ones_lock_never_blocks(
        tiny_checkpoints, tmp_path, client, reference):
    """Two sweeps of one store: the second says who is writing it and stops (exit 2, nothing
    computed twice). The first, connected to a scheduler without workers so that it holds
    the store for as long as the test needs, then dies by SIGKILL (no cleanup runs): its
    lock dies with it, and a rerun on a cluster with workers finishes the store."""
    import json

    from distributed import LocalCluster

    from sweep.cli import main
    from sweep.store.lock import lock_path

    cfg_path = tmp_path / "sweep.yaml"
    cfg_path.write_text(yaml.safe_dump(_doc(tiny_checkpoints, tmp_path / "run.zarr")))
    cfg = config_from_dict(_doc(tiny_checkpoints, tmp_path / "run.zarr"))
    with LocalCluster(n_workers=0, scheduler_port=0, dashboard_address=":0") as idle:
        log = open(tmp_path / "sweep.log", "w+")
        first = subprocess.Popen([sys.executable, "-m", "sweep", "sweep", str(cfg_path),
                                  "--scheduler", idle.scheduler_address],
                                 cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_for_holder(lock_path(cfg.store), first, log)
            second = subprocess.run([sys.executable, "-m", "sweep", "sweep", str(cfg_path),
                                     "--scheduler", client.scheduler.address],
                                    cwd=REPO, capture_output=True, text=True, timeout=120)
            assert second.returncode == 2, second.stdout + second.stderr
            holder = json.loads(lock_path(cfg.store).read_text())
            assert second.stderr == (
                f"tdos: error: store: another sweep (host {holder['host']}, pid {first.pid}, "
                f"since {holder['since']}) is writing {cfg.store} — wait for it to finish "
                f"(tdos sweep --wait waits), or stop it\n")
            assert not is_done(_ledger(cfg.store)).any()         # neither computed a block
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=60)
        finally:
            first.kill()
    assert lock_path(cfg.store).is_file()              # left behind, but nobody holds it
    assert main(["sweep", str(cfg_path), "--scheduler", client.scheduler.address, "--resume"]) == 0
    assert not lock_path(cfg.store).exists()           # taken over, then removed at the clean exit
    assert is_usable(_ledger(cfg.store)).all()
    _assert_equal_to_reference(cfg.store, reference)


def _wait_for_holder(lock, proc, log, timeout: float = 120) -> None:
    """Until `proc` has written itself into the lock file (it holds the lock from then on)."""
    import json

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            log.seek(0)
            raise AssertionError(f"the first sweep exited ({proc.returncode}):\n{log.read()}")
        try:
            if json.loads(lock.read_text() or "{}").get("pid") == proc.pid:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError("the first sweep never took the lock")


def test_wait_waits_for_the_other_sweep(tiny_checkpoints, tmp_path, client, reference):
    """`tdos sweep --wait` (a real CLI process) while this test holds the store's lock: it
    says whom it waits for and computes nothing until the lock is let go, then finishes."""
    from sweep.store.lock import lock_path, store_lock

    cfg_path = tmp_path / "sweep.yaml"
    cfg_path.write_text(yaml.safe_dump(_doc(tiny_checkpoints, tmp_path / "run.zarr")))
    store = str(config_from_dict(_doc(tiny_checkpoints, tmp_path / "run.zarr")).store)
    log = open(tmp_path / "sweep.log", "w+")
    with store_lock(store):
        waiter = subprocess.Popen([sys.executable, "-m", "sweep", "sweep", str(cfg_path), "--wait",
                                   "--scheduler", client.scheduler.address],
                                  cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        try:
            end = time.monotonic() + 120
            while "waiting for another sweep" not in (tmp_path / "sweep.log").read_text():
                assert waiter.poll() is None, (tmp_path / "sweep.log").read_text()
                assert time.monotonic() < end, "the second sweep never said it waits"
                time.sleep(0.05)
            assert f"pid {os.getpid()}" in (tmp_path / "sweep.log").read_text()
            assert waiter.poll() is None                   # still waiting while the lock is held
            assert not (tmp_path / "run.zarr" / NAME / "ledger").exists() or not is_done(_ledger(store)).any()
        except BaseException:
            waiter.kill()
            raise
    assert waiter.wait(timeout=300) == 0, (tmp_path / "sweep.log").read_text()
    assert not lock_path(store).exists()      # the waiter took the lock of the removed file's path
    assert is_usable(_ledger(store)).all()
    _assert_equal_to_reference(store, reference)
