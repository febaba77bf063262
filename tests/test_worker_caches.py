"""Worker caches on a long-lived cluster never serve stale state.

One single-worker cluster (so every task lands on the worker that holds the caches) runs
two sweeps in a row, as `tdos cluster up` or `--scheduler` does; the second sweep's store
must equal the one a fresh cluster writes. Two ways the old content could leak: the store
deleted and made again from another seed (new tokens behind the same path), and the
checkpoint overwritten in place (new weights behind the same path).
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
import zarr
from distributed import Client, LocalCluster

from sweep.config.load import config_from_dict
from sweep.run import run_sweep

ARRAYS = ("eigenvalues", "delta", "tokens", "a_log")


def _cluster():
    return LocalCluster(n_workers=1, threads_per_worker=1, processes=True, scheduler_port=0,
                        dashboard_address=":0")


@pytest.fixture(scope="module")
def long_lived():
    """One worker process kept across every sweep of this module."""
    with _cluster() as cluster, Client(cluster) as c:
        yield c


def _sweep(ckpt, store, seed, client) -> dict:
    """Every layer of the 3-layer tiny Mamba, one 8-token sequence; the stored arrays."""
    cfg = config_from_dict({"model": {"path": str(ckpt)}, "layers": "all", "store": str(store),
                            "inputs": {"sequences": 1, "length": 8, "seed": seed},
                            "compute": {"token_block": 4, "live_every": 0}})
    result = run_sweep(cfg, client=client, progress=False)
    assert (result.exit_code, result.errors) == (0, [])
    g = zarr.open_group(str(store), path=cfg.models[0].name, mode="r")
    return {k: g[k][...] for k in ARRAYS}


def _fresh(ckpt, store, seed) -> dict:
    with _cluster() as cluster, Client(cluster) as c:
        return _sweep(ckpt, store, seed, c)


def _assert_same(got: dict, want: dict) -> None:
    for k in ARRAYS:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_store_recreated_with_another_seed(tiny_checkpoints, tmp_path, long_lived):
    store = tmp_path / "run.zarr"
    first = _sweep(tiny_checkpoints["mamba"], store, 3, long_lived)
    shutil.rmtree(store)
    second = _sweep(tiny_checkpoints["mamba"], store, 7, long_lived)
    assert not np.array_equal(first["tokens"], second["tokens"])
    _assert_same(second, _fresh(tiny_checkpoints["mamba"], tmp_path / "fresh.zarr", 7))


def _save_mamba(out, seed):
    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(seed)
    cfg = MambaConfig(vocab_size=64, hidden_size=16, num_hidden_layers=3, state_size=4, expand=2,
                      conv_kernel=4, time_step_rank=4)
    model = MambaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))          # off the structured initialisation
    model.save_pretrained(out)


def test_checkpoint_overwritten_in_place(tmp_path, long_lived):
    ckpt = tmp_path / "ckpt"
    _save_mamba(ckpt, seed=1)
    first = _sweep(ckpt, tmp_path / "a.zarr", 0, long_lived)
    _save_mamba(ckpt, seed=2)                           # continued training, same directory
    second = _sweep(ckpt, tmp_path / "b.zarr", 0, long_lived)
    assert not np.array_equal(first["a_log"], second["a_log"]) or \
        not np.array_equal(first["eigenvalues"], second["eigenvalues"])
    _assert_same(second, _fresh(ckpt, tmp_path / "fresh.zarr", 0))
