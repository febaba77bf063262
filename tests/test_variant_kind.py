"""Issue 55 item 1: a new kind of weight variant is one registration. `scaled`, defined in this
file alone (every tensor times a constant drawn from its seed and the tensor's name), is
written under `nulls:` like the kinds of tdos, swept on real worker processes of a Dask
LocalCluster (which import this file to register it, as a user's plugin module is given to
Dask's --preload) into a real store, exported by `tdos export-null` and read back exactly,
and analysed by `tdos analyze`: its comparison is in fits.json, as its own kind.
"""
from __future__ import annotations

import importlib
import json

import numpy as np
import pytest
import torch
from conftest import local_client
from distributed.diagnostics.plugin import WorkerPlugin
from families import DEEPEST, tiny_model

from analysis import open_store
from sweep.checkpoints.kinds import Kind, register
from sweep.checkpoints.makers import Maker
from sweep.cli import main
from sweep.config.load import config_from_dict
from sweep.format.variants import Variant
from sweep.run import run_sweep


class Scaled(Maker):
    """Every tensor times c in [1/2, 3/2), c drawn from (seed, the tensor's name): its rows
    too (a row of the embedding is the row of the scaled table)."""

    def scale(self, name: str) -> float:
        return 0.5 + np.random.default_rng(self.seed_of(name)).random()

    def tensor(self, name: str, real: torch.Tensor) -> torch.Tensor:
        return real * self.scale(name)


register(Kind("scaled", "null", Scaled))


class RegisterOnWorkers(WorkerPlugin):
    """Each worker imports this module (and so registers `scaled`), as Dask's --preload would."""

    name = "tdos-test-scaled"

    def setup(self, worker=None):
        importlib.import_module(__name__)


SEQS, L = 2, 8
LAYERS = [0, DEEPEST]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    root = tmp_path_factory.mktemp("scaled")
    tiny_model("llama", torch.Generator().manual_seed(2)).save_pretrained(root / "llama")
    doc = {"model": {"path": str(root / "llama"), "name": "llama",
                     "nulls": {"scaled": 2, "random_init": 2, "sequences": 1}},
           "inputs": {"sequences": SEQS, "length": L, "seed": 4}, "layers": LAYERS,
           "store": str(root / "s.zarr"), "compute": {"token_block": 4, "live_every": 0},
           "analysis": {"lengths": [L], "n_boot": 20}}
    with local_client(1) as client:
        client.register_plugin(RegisterOnWorkers())
        assert run_sweep(config_from_dict(doc), client=client, progress=False).exit_code == 0
        assert main(["export-null", doc["store"], "llama.scaled.1", str(root / "export")]) == 0
        again = {**doc, "model": {"path": str(root / "export"), "name": "export"},
                 "store": str(root / "export.zarr")}
        assert run_sweep(config_from_dict(again), client=client, progress=False).exit_code == 0
    return root


def test_the_store_holds_the_new_kind_as_a_null(swept):
    st = open_store(swept / "s.zarr", "llama")
    assert st.nulls == ["llama.random_init.0", "llama.random_init.1", "llama.scaled.0", "llama.scaled.1"]
    assert st.model("llama.scaled.1").variant == Variant("scaled", 1, "llama", "null")
    scaled = st.model("llama.scaled.0").eigenvalues(DEEPEST, 0)
    assert np.isfinite(scaled).all()
    assert not np.allclose(scaled, st.eigenvalues(DEEPEST, 0))         # not the trained weights


def test_its_export_gives_its_stored_eigenvalues_exactly(swept):
    null, export = open_store(swept / "s.zarr", "llama.scaled.1"), open_store(swept / "export.zarr")
    from safetensors.torch import load_file

    real = load_file(swept / "llama" / "model.safetensors")
    made = load_file(swept / "export" / "model.safetensors")
    maker = Scaled(Variant("scaled", 1, "llama"))
    key = f"model.layers.{DEEPEST}.mlp.down_proj.weight"
    assert torch.equal(made[key], real[key] * maker.scale(key))          # what the kind says
    for layer in LAYERS:
        np.testing.assert_array_equal(null.eigenvalues(layer, 0), export.eigenvalues(layer, 0))


def test_analyze_compares_the_model_with_the_new_kind_on_its_own(swept, tmp_path):
    assert main(["analyze", str(swept / "s.zarr"), "--out", str(tmp_path / "r")]) == 0
    nulls = json.loads((tmp_path / "r" / "fits.json").read_text())["models"]["llama"]["nulls"]
    assert set(nulls["kinds"]) == {"random_init", "scaled"}
    assert nulls["kinds"]["scaled"]["nulls"] == ["llama.scaled.0", "llama.scaled.1"]
    scaled = [c for c in nulls["comparisons"] if c["kind"] == "scaled"]
    assert scaled and all(c["n_nulls"] == 2 and c["p_method"] for c in scaled)
    # β from 79 modes is "not enough data" (Δ null); the per-token observables are measured
    assert any(c["delta"] is not None and np.isfinite(c["delta"]) for c in scaled)
