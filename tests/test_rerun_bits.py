"""Digits a rerun gives (issue 56 item 10): two sweeps of one config on one machine write the
same spectra bit for bit, whatever worker computes which task and in what order.

The shipped demo checkpoints (a Mamba on its hand-written path, a GPT-NeoX on the hand-written
attention path, 4 layers each: the deepest is a chain's end), float32, walked up all four
layers with stacks of 2 and 4 (`depth:`). The first sweep runs on one worker process, the
second on two, so the tasks reach other processes in another order; every float array of both
groups, block spectra, stacks, Lyapunov exponents, norms and residuals, must be equal to the
bit (NaN where NaN). What differs between machines (compute.cpu_linalg picks the library by
CPU vendor) is not what this holds: docs/performance.md, "Digits a rerun gives".
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr
from conftest import local_client

from sweep.config.load import config_from_dict
from sweep.run import run_sweep

REPO = Path(__file__).resolve().parents[1]


def _doc(store: Path) -> dict:
    return {"models": [{"path": str(REPO / "checkpoints" / n), "name": n.split("-")[1]}
                       for n in ("tiny-mamba-bytes", "tiny-neox-bytes")],
            "inputs": {"sequences": 2, "length": 24, "text": str(REPO / "configs" / "demo-text.py.txt")},
            "layers": "all", "store": str(store), "compute": {"token_block": 12, "live_every": 0},
            "depth": {"spans": [2, 4]}}


def _arrays(group: zarr.Group, path: str = ""):
    for name, member in group.members():
        if isinstance(member, zarr.Group):
            yield from _arrays(member, f"{path}{name}/")
        else:
            yield f"{path}{name}", member[...]


def test_two_sweeps_of_one_config_write_the_same_spectra_bit_for_bit(tmp_path):
    stores = []
    for workers in (1, 2):
        store = tmp_path / f"run{workers}.zarr"
        with local_client(workers) as client:
            assert run_sweep(config_from_dict(_doc(store)), client=client, progress=False).exit_code == 0
        stores.append(zarr.open_group(str(store), mode="r"))
    first = dict(_arrays(stores[0]))
    second = dict(_arrays(stores[1]))
    assert first.keys() == second.keys()
    floats = [k for k, v in first.items() if v.dtype.kind in "fc"]
    assert {"mamba/eigenvalues", "neox/eigenvalues", "neox/stack_eigenvalues", "mamba/lyapunov"} <= set(floats)
    differ = [k for k in floats if not np.array_equal(first[k], second[k], equal_nan=True)]
    assert differ == []
    assert np.isfinite(first["neox/stack_eigenvalues"]).any()      # the walks ran
