"""Issue 56 item 5, the sweep: the `gaussian` null (every tensor iid normal with the trained
tensor's own mean and sd) and the shared-basis null `shuffled_layers` (the trained decoder
layers in a seeded order: every layer trained, the residual basis they share kept, which layer
feeds which broken; docs/nulls.md), each swept on real worker processes on the layer-local
route and on the whole-model route, at the deepest of 4 layers.

Oracles: `tdos export-null` writes each as a save_pretrained checkpoint, which plain
transformers loads and tdos sweeps as an ordinary model on the same route: its stored blocks
are the null's, exactly. The exported tensors are read against the trained safetensors: the
gaussian's per-tensor mean and sd within their sampling error, the shuffled_layers' layer l
the trained layer order[l] bit for bit, order a derangement, everything outside the layers the
trained tensors; the layer-local worker's resident layer equals the export's.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from conftest import local_client
from families import DEEPEST, LAYERS, tiny_model
from safetensors.torch import load_file

from analysis import open_store
from sweep.cli import main
from sweep.config.load import config_from_dict
from sweep.format.variants import Variant
from sweep.plan.make import Plan, make_plan
from sweep.run import run_sweep

SEQS, L = 2, 8
SWEPT = [1, DEEPEST]
NULLS = ("llama.gaussian.0", "llama.shuffled_layers.0")
WHOLE = "forced by the test: the whole-model route"


def _doc(path, store, name="llama", nulls=None) -> dict:
    model = {"path": str(path), "name": name, **({"nulls": nulls} if nulls else {})}
    return {"model": model, "inputs": {"sequences": SEQS, "length": L, "seed": 5}, "layers": SWEPT,
            "store": str(store), "compute": {"token_block": 4, "live_every": 0}}


def _whole(plan: Plan) -> Plan:
    """`plan` with every model on the whole-model route (as a worker that cannot hold one layer)."""
    return Plan(plan.config, tuple(dataclasses.replace(m, info=dataclasses.replace(m.info, not_local=WHOLE))
                                   for m in plan.models))


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """{route: (null store, {null: export store})} and the directory of the checkpoints."""
    root = tmp_path_factory.mktemp("newnulls")
    tiny_model("llama", torch.Generator().manual_seed(3)).save_pretrained(root / "llama")
    out = {}
    with local_client(1) as client:
        for route in ("local", "whole"):
            plan = make_plan(config_from_dict(_doc(root / "llama", root / f"{route}.zarr",
                                                   nulls={"gaussian": 1, "shuffled_layers": 1})))
            plan = _whole(plan) if route == "whole" else plan
            assert run_sweep(plan, client=client, progress=False).exit_code == 0
            exports = {}
            for null in NULLS:
                export = root / f"{route}-{null}"
                assert main(["export-null", str(root / f"{route}.zarr"), null, str(export)]) == 0
                plan = make_plan(config_from_dict(_doc(export, root / f"{route}-{null}.zarr", "export")))
                plan = _whole(plan) if route == "whole" else plan
                assert run_sweep(plan, client=client, progress=False).exit_code == 0
                exports[null] = root / f"{route}-{null}.zarr"
            out[route] = (root / f"{route}.zarr", exports)
    return out, root


@pytest.mark.parametrize("route", ["local", "whole"])
@pytest.mark.parametrize("null", NULLS)
def test_the_exported_null_gives_its_stored_blocks_exactly(swept, route, null):
    out, _ = swept
    store, exports = out[route]
    stored, export = open_store(store, null), open_store(exports[null])
    trained = open_store(store, "llama")
    assert stored.variant.role == "null" and stored.group["tokens"].shape == (SEQS, L)
    for layer in SWEPT:
        got = stored.eigenvalues(layer, seq=0)
        assert np.isfinite(got).all()
        np.testing.assert_array_equal(got, export.eigenvalues(layer, seq=0))
        np.testing.assert_array_equal(stored.frobenius2(layer, seq=0), export.frobenius2(layer, seq=0))
        assert not np.allclose(np.sort(np.abs(got[-1])), np.sort(np.abs(trained.eigenvalues(layer, 0)[-1])))


def test_the_gaussian_keeps_each_tensors_mean_and_sd_and_nothing_else(swept):
    _, root = swept
    real = load_file(root / "llama" / "model.safetensors")
    made = load_file(root / "local-llama.gaussian.0" / "model.safetensors")
    assert real.keys() <= made.keys()
    drawn = 0
    for k, t in real.items():
        x, y = t.double().flatten(), made[k].double().flatten()
        sd = x.std(correction=0)
        if sd == 0:                               # a constant tensor stays that constant
            assert torch.equal(y, x), k
            continue
        n = x.numel()
        assert abs(y.mean() - x.mean()) < 5 * sd / n ** 0.5, k
        assert abs(y.std(correction=0) / sd - 1) < 5 / (2 * n) ** 0.5 + 1e-6, k
        assert not torch.equal(y.sort().values, x.sort().values), k      # not the trained values
        drawn += 1
    assert drawn >= 7 * LAYERS                      # every weight matrix of every layer drawn
    _same_on_the_layer_local_route(root, "gaussian", made)


def test_shuffled_layers_holds_the_trained_layers_in_a_seeded_derangement(swept):
    from sweep.checkpoints.kinds import maker
    from sweep.plan.layers import decoder_layers
    from sweep.worker.model import load_local

    _, root = swept
    real = load_file(root / "llama" / "model.safetensors")
    made = load_file(root / "local-llama.shuffled_layers.0" / "model.safetensors")
    m = maker(Variant("shuffled_layers", 0, "llama"))
    whole = load_local(root / "llama", "float32").hf
    m.bind(whole, list(decoder_layers(whole)))
    order = m.order
    assert sorted(order) == list(range(LAYERS)) and all(order[i] != i for i in range(LAYERS))
    moved = 0
    for k, t in made.items():
        if ".layers." in k:
            i = int(k.split(".layers.")[1].split(".")[0])
            src = k.replace(f".layers.{i}.", f".layers.{order[i]}.")
            assert torch.equal(t, real[src]), k                 # layer i is trained layer order[i]
            moved += 1
        else:
            assert torch.equal(t, real.get(k, real["model.embed_tokens.weight"])), k   # kept
    assert moved == sum(".layers." in k for k in real)
    _same_on_the_layer_local_route(root, "shuffled_layers", made)


def _same_on_the_layer_local_route(root, kind: str, made: dict) -> None:
    """The layer-local worker's resident layers and embedding rows equal the export's."""
    from sweep.generic.local import LocalModel

    lm = LocalModel(root / "llama", torch.float32, variant=Variant(kind, 0, "llama"))
    for layer in (DEEPEST, 0):
        lm.resident(layer)
        for k, p in lm.model.model.layers[layer].named_parameters():
            assert torch.equal(p, made[f"model.layers.{layer}.{k}"]), (layer, k)
    assert torch.equal(lm.model.model.norm.weight, made["model.norm.weight"])
    ids = torch.tensor([7, 2, 7, 11])
    lm.sequence(ids)
    assert torch.equal(lm.embedding.weight, made["model.embed_tokens.weight"][torch.unique(ids)])


def test_the_dry_run_prices_making_each_kind_from_its_registration(tmp_path):
    """The budget reads each kind's registered cost (sweep/checkpoints/kinds.py): a gaussian
    null holds its whole embedding and its draw (12 bytes an entry) while a layer-local worker
    makes it; shuffled_layers reads another layer's tensors as they are stored (nothing made)."""
    from sweep.budget.memory import variant_bytes
    from sweep.checkpoints.kinds import get

    tiny_model("llama", torch.Generator().manual_seed(3)).save_pretrained(tmp_path / "llama")
    plan = make_plan(config_from_dict(_doc(tmp_path / "llama", tmp_path / "s.zarr",
                                           nulls={"gaussian": 1, "shuffled_layers": 1})))
    made = {m.name: variant_bytes(m) for m in plan.models}
    info = plan.models[0].info
    assert made == {"llama": 0, NULLS[0]: 12 * info.vocab_size * info.d_model, NULLS[1]: 0}
    assert get("gaussian").cost(whole=True).bytes(info) == 12 * info.vocab_size * info.d_model
