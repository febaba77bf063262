"""Shared by the real-cluster sweep tests (test_slurm, test_dask_cli): one small Mamba sweep
of many one-token blocks, so a fault lands mid-sweep, and the checks on its store."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from distributed import Client, LocalCluster

from sweep.format.ledger import is_done

NAME = "mamba"
TOTAL = 3 * 4 * 16          # 3 layers x 4 sequences x 16 one-token blocks
ARRAYS = ("eigenvalues", "scale_rayleigh", "delta", "a_log", "tokens")


def sweep_doc(ck, store, cluster: dict | None = None) -> dict:
    doc = {"model": {"path": str(ck["mamba"])}, "inputs": {"sequences": 4, "length": 16, "seed": 1},
           "layers": "all", "store": str(store), "compute": {"token_block": 1, "live_every": 0}}
    if cluster is not None:
        doc["cluster"] = cluster
    return doc


@pytest.fixture(scope="session")
def reference(tiny_checkpoints, tmp_path_factory):
    """Arrays of `sweep_doc` run on a local cluster: what every other cluster must reproduce.
    Modules share it by importing it (`from sweep_helpers import reference`)."""
    from sweep.config.load import config_from_dict
    from sweep.run import run_sweep

    cfg = config_from_dict(sweep_doc(tiny_checkpoints, tmp_path_factory.mktemp("ref") / "run.zarr"))
    # a worker process, set up as every cluster's workers are (threads, BLAS): bit-equal results
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        result = run_sweep(cfg, client=client, progress=False)
    assert (result.exit_code, result.done) == (0, TOTAL)
    return arrays(cfg.store)


def arrays(store) -> dict:
    g = zarr.open_group(str(store), path=NAME, mode="r")
    return {k: g[k][...] for k in ARRAYS}


def assert_equal_arrays(store, reference: dict) -> None:
    got = arrays(store)
    for k, want in reference.items():
        np.testing.assert_array_equal(got[k], want, err_msg=k)


def ledger(store) -> np.ndarray:
    return zarr.open_group(str(store), path=NAME, mode="r")["ledger"][...]      # (R, S, nb)


def wait_for_blocks(store, n: int, timeout: float = 300) -> int:
    """Poll the ledger until at least n blocks are done; returns how many were."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if (Path(store) / NAME / "ledger" / "zarr.json").is_file():
            done = int(is_done(ledger(store)).sum())
            if done >= n:
                return done
        time.sleep(0.02)
    raise AssertionError(f"fewer than {n} blocks landed in {timeout}s")
