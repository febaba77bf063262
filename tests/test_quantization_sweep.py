"""Issue 49 item 4, the sweep: a quantization ensemble swept on real worker processes from a
small Q8_0 LLaMA GGUF (4 layers) written by the `gguf` package's writer, at its first layer and
its deepest, where the layer-local worker runs 3 stand-ins below it, each the member's own.

The oracle is a second GGUF, written here: the same metadata, every tensor replaced in the
file's own layout by member 0's weights (sweep.checkpoints.gguf_tensors.perturbed on the raw blocks),
stored as F32. Swept as an ordinary model in float32, it must give member 0's stored
eigenvalues exactly: the member's weights pass through transformers' own tensor processor on
the worker, the oracle's through the plain F32 route. Beside it: the store names its members
(not nulls), a member's resident weights lie within half a step of the trained ones on both
routes, the dry run counts the members, and a larger ensemble grows the store.
"""
from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
import zarr
from conftest import local_client
from families import DEEPEST, tiny_model
from gguf_files import _metadata, write_gguf

from analysis import open_store
from sweep.config.load import config_from_dict
from sweep.checkpoints.ensemble import draws
from sweep.checkpoints.gguf_tensors import gaps, perturbed
from sweep.format.variants import Variant, folded, trained_models
from sweep.run import run_sweep

SEQS, L = 2, 6
LAYERS = (0, DEEPEST)       # the first layer, and the deepest: 3 stand-ins below it


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """(Q8_0 GGUF, the F32 GGUF of its member 0) of a 4-layer LLaMA, d = 32."""
    model = tiny_model("llama", torch.Generator().manual_seed(1))
    d = tmp_path_factory.mktemp("quant")
    q8 = write_gguf(model, d / "llama-q8.gguf", "Q8_0")
    w = gguf.GGUFWriter(str(d / "member0.gguf"), "llama")
    _metadata(w, model.config)
    for t in gguf.GGUFReader(q8).tensors:
        w.add_tensor(t.name, perturbed(t.data, t.tensor_type, draws(0), t.name).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return q8, d / "member0.gguf"


def _doc(files, store, ensemble=2) -> dict:
    q8, member0 = files
    return {"models": [{"path": str(q8), "name": "llama", "quantization": {"ensemble": ensemble,
                                                                          "sequences": 1}},
                       {"path": str(member0), "name": "oracle"}],
            "inputs": {"sequences": SEQS, "length": L, "seed": 3},
            "layers": list(LAYERS), "store": str(store), "compute": {"token_block": 3, "live_every": 0}}


@pytest.fixture(scope="module")
def swept(files, tmp_path_factory):
    store = tmp_path_factory.mktemp("stores") / "s.zarr"
    with local_client(1) as client:
        res = run_sweep(config_from_dict(_doc(files, store)), client=client, progress=False)
    assert res.exit_code == 0
    return store


def test_the_store_names_its_members_and_they_are_not_nulls(swept):
    root = zarr.open_group(str(swept), mode="r")
    assert list(root.attrs["models"]) == ["llama", "llama.quantized.0", "llama.quantized.1", "oracle"]
    assert Variant.from_attrs(root["llama.quantized.1"].attrs) == Variant("quantized", 1, "llama", "ensemble")
    assert folded(root, "ensemble")["llama"] == ["llama.quantized.0", "llama.quantized.1"]
    assert folded(root, "null")["llama"] == [] and trained_models(root) == ["llama", "oracle"]
    st = open_store(swept, "llama")
    assert st.ensemble == ["llama.quantized.0", "llama.quantized.1"] and st.nulls == []
    assert st.model("llama.quantized.0").variant == Variant("quantized", 0, "llama", "ensemble")


def test_member_zero_gives_the_eigenvalues_of_its_weights_written_as_f32_exactly(swept):
    st = open_store(swept, "llama")
    member, oracle, trained = st.model("llama.quantized.0"), st.model("oracle"), st
    for layer in LAYERS:
        got = member.eigenvalues(layer, 0)
        np.testing.assert_array_equal(got, oracle.eigenvalues(layer, 0))
        other = st.model("llama.quantized.1").eigenvalues(layer, 0)
        base = trained.eigenvalues(layer, 0)
        assert not np.array_equal(got, other) and not np.array_equal(got, base)
        # Q8_0 steps are ~1 % of a weight: each token's moduli move, a little
        moved = np.abs(np.sort(np.abs(got), axis=-1) - np.sort(np.abs(base), axis=-1))
        assert 0 < np.nanmax(moved) < 0.1


def test_a_members_weights_lie_within_half_a_step_on_both_routes(files):
    from sweep.checkpoints import kinds
    from sweep.checkpoints.formats import open_checkpoint
    from sweep.generic.local import LocalModel
    from sweep.plan.layers import decoder_layers
    from sweep.worker.model import load_local

    q8, _ = files
    one = Variant("quantized", 1, "llama", "ensemble")
    steps = {t.name: gaps(t.data, t.tensor_type)[1].max() for t in gguf.GGUFReader(q8).tensors}
    trained = LocalModel(q8, torch.float64)
    member = LocalModel(q8, torch.float64, variant=one)
    whole = load_local(q8, "float64")
    kinds.maker(one).whole(whole.hf, open_checkpoint(q8), decoder_layers(whole.hf))
    held = dict(whole.hf.named_parameters())
    names = trained.ckpt.sources
    for layer in LAYERS:
        trained.resident(layer)
        member.resident(layer)
        for (key, p), q in zip(trained.layers[layer].named_parameters(),
                               member.layers[layer].parameters()):
            full = f"model.layers.{layer}.{key}"
            gguf_name = names[full].parts[0][1]
            moved = (q - p).abs()
            np.testing.assert_array_equal(q.numpy(), held[full].detach().numpy())   # both routes
            if p.ndim == 1:                                      # norms: F32, left as they are
                assert torch.equal(p, q)
            else:
                assert moved.max() <= steps[gguf_name] / 2 and (moved > 0).float().mean() > 0.99


def test_dry_run_counts_the_members(files, tmp_path):
    from sweep.budget import size_sweep
    from sweep.plan.make import make_plan

    three = size_sweep(make_plan(config_from_dict(_doc(files, tmp_path / "b.zarr", 3))), workers=1)
    per_model = SEQS * -(-L // 3) * len(LAYERS)
    # the model and the oracle on every sequence, three members on 1 of 2
    assert three.blocks == 2 * per_model + 3 * per_model // SEQS
    assert {r.model for r in three.rows} == {"llama", "llama.quantized.0", "llama.quantized.1",
                                             "llama.quantized.2", "oracle"}
    assert "drawn within its bins" in three.worker_parts        # a member's working copies


def test_a_larger_ensemble_grows_the_store(files, swept, tmp_path):
    """ensemble 2 -> 3: member 2 is added and swept, members 0 and 1 keep every chunk and the
    store holds an ensemble of 3 now; a config of 2 again hides member 2, and the size stays 3."""
    import hashlib
    import shutil

    from sweep.format.ledger import is_done

    store = tmp_path / "grown.zarr"
    shutil.copytree(swept, store)

    def chunks():   # {chunk file: (mtime_ns, sha256)}: zarr v3 keeps chunks under <array>/c/
        return {str(p.relative_to(store)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
                for p in store.rglob("*") if p.is_file() and "c" in p.relative_to(store).parts}

    def sizes():
        return len(open_store(store, "llama").ensemble)

    before = chunks()
    assert sizes() == 2
    with local_client(1) as client:
        res = run_sweep(config_from_dict(_doc(files, store, 3)), client=client, progress=False)
        assert res.exit_code == 0
        after = chunks()
        assert sizes() == 3
        res = run_sweep(config_from_dict(_doc(files, store, 2)), client=client, progress=False)
    assert res.exit_code == 0 and sizes() == 3
    assert before and all(after[k] == v for k, v in before.items())
    root = zarr.open_group(str(store), mode="r")
    assert folded(root, "ensemble")["llama"] == ["llama.quantized.0", "llama.quantized.1",
                                                 "llama.quantized.2"]
    assert is_done(root["llama.quantized.2"]["ledger"][...][:, :1]).all()
    assert open_store(store, "llama.quantized.2").variant == Variant("quantized", 2, "llama", "ensemble")


def test_members_read_the_nulls_tokens_by_default_and_other_tokens_are_refused(files, tmp_path):
    """Issue 56 item 7: without `quantization.sequences` the members read the nulls' first n
    sequences; a different n is refused in one line before anything runs."""
    from sweep.config.load import ConfigError
    from sweep.plan.make import make_plan

    doc = _doc(files, tmp_path / "s.zarr")
    doc["models"][0]["nulls"] = {"random_init": 1, "sequences": 1}
    del doc["models"][0]["quantization"]["sequences"]
    plan = make_plan(config_from_dict(doc))
    variants = [m for m in plan.models if m.variant is not None]
    assert [m.variant.role for m in variants] == ["null", "ensemble", "ensemble"]
    for m in variants:
        np.testing.assert_array_equal(m.tokens, plan.models[0].tokens[:1])
    doc["models"][0]["quantization"]["sequences"] = 2
    with pytest.raises(ConfigError, match=r"^models\[0\]\.quantization\.sequences: 2 differs from the "
                                          r"nulls' 1 — members read the nulls' tokens"):
        config_from_dict(doc)


def test_an_ensemble_of_eight_members_on_the_nulls_tokens_sweeps_and_is_analysed(files, tmp_path):
    import json

    from sweep.cli import main

    q8, _ = files
    store = tmp_path / "eight.zarr"
    doc = {"model": {"path": str(q8), "name": "llama", "nulls": {"random_init": 2, "sequences": 1},
                     "quantization": {"ensemble": 8}},
           "inputs": {"sequences": SEQS, "length": L, "seed": 3}, "layers": [DEEPEST],
           "store": str(store), "compute": {"token_block": 3, "live_every": 0},
           "analysis": {"lengths": [L], "n_boot": 20}}
    with local_client(1) as client:
        assert run_sweep(config_from_dict(doc), client=client, progress=False).exit_code == 0
    st = open_store(store, "llama")
    assert st.ensemble == [f"llama.quantized.{k}" for k in range(8)]
    nulls = st.model("llama.random_init.0").tokens(seq=0)
    for name in st.ensemble:
        member = st.model(name)
        assert member.group["tokens"].shape == (1, L)                  # the nulls' one sequence
        np.testing.assert_array_equal(member.tokens(seq=0), nulls)
        assert np.isfinite(member.eigenvalues(DEEPEST, 0)).all()
    assert main(["analyze", str(store), "--out", str(tmp_path / "r")]) == 0
    ens = json.loads((tmp_path / "r" / "fits.json").read_text())["ensembles"]["llama"]
    assert ens["members"] == st.ensemble
    assert all(len(o["members"]) == 8 for o in ens["observables"])
