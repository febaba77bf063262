"""Null models (docs/nulls.md): swept like models on real worker processes, weights made per
layer on the workers.

A 4-layer LLaMA (the hand-written path) with one random_init and one shuffled null, on one
sequence of the model's two: the store names the nulls (group attribute `variant`, root
`models`), a second sweep of the same config gives identical blocks, the null's resident
layer equals the model's own `_init_weights` of a fresh layer under the stated seed, no file
larger than one layer is written, a shuffled null's tensors are permutations of the real ones
on both routes, and the null exported by `tdos export-null`, swept as an ordinary model,
gives the null's stored eigenvalues exactly.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
import torch
from conftest import local_client
from families import LAYERS, tiny_model

from analysis import open_store
from sweep.cli import main
from sweep.config.load import ConfigError, config_from_dict
from sweep.checkpoints import kinds
from sweep.checkpoints.formats import open_checkpoint
from sweep.checkpoints.makers import null_seed
from sweep.format.variants import Variant
from sweep.plan.layers import decoder_layers
from sweep.run import run_sweep

SEQS, L = 2, 6
NULLS = ("llama.random_init.0", "llama.shuffled.0")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("nulls") / "llama"
    tiny_model("llama", torch.Generator().manual_seed(1)).save_pretrained(path)
    return path


def _doc(path, store, nulls=None) -> dict:
    model = {"path": str(path), "name": "llama"}
    if nulls is not None:
        model["nulls"] = nulls
    return {"model": model, "inputs": {"sequences": SEQS, "length": L, "seed": 3},
            "layers": "all", "store": str(store), "compute": {"token_block": 3, "live_every": 0}}


def _whole_null(path, kind: str, seed: int, of: str = "llama"):
    """The whole-model route's null (a worker that falls back, `tdos export-null`): checkpoint
    `path` loaded whole, every tensor made by the kind's maker."""
    from sweep.worker.model import load_local

    whole = load_local(path, "float32").hf
    kinds.maker(Variant(kind, seed, of)).whole(whole, open_checkpoint(path), decoder_layers(whole))
    return whole


def _layer_bytes(path) -> int:
    from safetensors import safe_open

    with safe_open(path / "model.safetensors", "pt") as f:
        return sum(f.get_tensor(k).numel() * 4 for k in f.keys() if ".layers.0." in k)


@pytest.fixture(scope="module")
def swept(checkpoint, tmp_path_factory):
    """Two sweeps of the same config with nulls, then the random_init null exported and swept
    as an ordinary model; every file the client and its workers wrote under their temp dir
    (TMPDIR, a directory of this test: the workers' scratch space is there too)."""
    root = tmp_path_factory.mktemp("stores")
    scratch = tmp_path_factory.mktemp("tmpdir")
    nulls = {"random_init": 1, "shuffled": 1, "sequences": 1}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(scratch))
        mp.setattr(tempfile, "tempdir", None)          # the client process reads TMPDIR again
        with local_client(1) as client:
            for run in ("a", "b"):
                res = run_sweep(config_from_dict(_doc(checkpoint, root / f"{run}.zarr", nulls)),
                                client=client, progress=False)
                assert res.exit_code == 0
            assert main(["export-null", str(root / "a.zarr"), NULLS[0], str(root / "export")]) == 0
            res = run_sweep(config_from_dict(_doc(root / "export", root / "export.zarr")),
                            client=client, progress=False)
            assert res.exit_code == 0
    return root, [p for p in scratch.rglob("*") if p.is_file()]


def test_the_store_names_its_nulls(swept):
    root, _ = swept
    st = open_store(root / "a.zarr", "llama")
    assert st.models == ["llama", *NULLS]
    assert st.nulls == list(NULLS)
    for name, kind in zip(NULLS, ("random_init", "shuffled")):
        null = open_store(root / "a.zarr", name)
        assert null.variant == Variant(kind, 0, "llama", "null")
        assert null.identity["variant"] == null.variant.attrs()  # the fingerprint of its group
        assert null.tokens(seq=0).tolist() == st.tokens(seq=0).tolist()
        assert null.group["tokens"].shape == (1, L)              # nulls.sequences: 1 of 2
    assert st.variant is None


def test_a_null_swept_twice_gives_identical_blocks(swept):
    root, _ = swept
    for name in NULLS:
        a, b = open_store(root / "a.zarr", name), open_store(root / "b.zarr", name)
        real = open_store(root / "a.zarr", "llama")
        for layer in range(LAYERS):
            ea, eb = a.eigenvalues(layer, seq=0), b.eigenvalues(layer, seq=0)
            assert np.isfinite(ea).all()
            assert np.array_equal(ea, eb)
            assert not np.allclose(np.sort_complex(ea[-1]), np.sort_complex(real.eigenvalues(layer, 0)[-1]))


def test_the_exported_null_gives_the_stored_eigenvalues_exactly(swept):
    root, _ = swept
    null, export = open_store(root / "a.zarr", NULLS[0]), open_store(root / "export.zarr")
    assert null.tokens(seq=0).tolist() == export.tokens(seq=0).tolist()
    for layer in range(LAYERS):
        assert np.array_equal(null.eigenvalues(layer, seq=0), export.eigenvalues(layer, seq=0))


def test_no_file_larger_than_one_layer_is_written(swept, checkpoint):
    root, tmp = swept
    limit = _layer_bytes(checkpoint)
    model_bytes = (checkpoint / "model.safetensors").stat().st_size
    assert model_bytes > 3 * limit                     # the check can tell a layer from a model
    written = [p for d in ("a.zarr", "b.zarr") for p in (root / d).rglob("*") if p.is_file()] + tmp
    assert written
    big = [(str(p), p.stat().st_size) for p in written if p.stat().st_size > limit]
    assert not big


def test_random_init_layer_is_the_models_own_init_under_the_stated_seed(checkpoint):
    """The worker's resident layer against a fresh from_config model whose layer is filled by
    `_init_weights` module by module (children first), each under null_seed(seed, kind, path)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from sweep.generic.local import LocalModel

    seed, layer = 5, 2
    lm = LocalModel(checkpoint, torch.float32, variant=Variant("random_init", seed, "llama"))
    lm.resident(LAYERS - 1)                  # layers below it are stand-ins now: made again
    lm.resident(layer)
    fresh = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(checkpoint))
    path = f"model.layers.{layer}"
    for name, m in reversed(list(fresh.model.layers[layer].named_modules())):
        with torch.random.fork_rng(), torch.no_grad():
            torch.manual_seed(null_seed(seed, "random_init", f"{path}.{name}" if name else path))
            fresh._init_weights(m)
    got = dict(lm.model.model.layers[layer].named_parameters())
    want = dict(fresh.model.layers[layer].named_parameters())
    assert got.keys() == want.keys()
    for k in want:
        assert torch.equal(got[k], want[k]), k
    other = LocalModel(checkpoint, torch.float32, variant=Variant("random_init", seed + 1, "llama"))
    other.resident(layer)
    assert not torch.equal(got["self_attn.q_proj.weight"],
                           other.model.model.layers[layer].self_attn.q_proj.weight)


def test_shuffled_tensors_are_permutations_of_the_real_ones_on_both_routes(checkpoint):
    from safetensors.torch import load_file

    from sweep.generic.local import LocalModel

    real = load_file(checkpoint / "model.safetensors")
    whole = _whole_null(checkpoint, "shuffled", 1)
    moved = 0
    for k, p in whole.state_dict().items():
        src = real.get(k, real.get("model.embed_tokens.weight"))    # lm_head: tied or not
        if k not in real:
            continue
        assert torch.equal(p.flatten().sort().values, src.flatten().sort().values), k
        moved += not torch.equal(p, src)
    assert moved == len(real)
    lm = LocalModel(checkpoint, torch.float32, variant=Variant("shuffled", 1, "llama"))
    lm.resident(1)
    for k, p in lm.model.model.layers[1].named_parameters():
        assert torch.equal(p, whole.model.layers[1].get_parameter(k)), k


def test_nulls_config_errors_name_the_field(checkpoint, tmp_path):
    cases = [({"random_init": -1}, "model.nulls.random_init"),
             ({"shuffled": 1, "sequences": 3}, "model.nulls.sequences"),
             ({"shuffle": 1}, "model.nulls.shuffle"),
             ({"random_init": "two"}, "model.nulls.random_init")]
    for nulls, field in cases:
        with pytest.raises(ConfigError) as e:
            config_from_dict(_doc(checkpoint, tmp_path / "s.zarr", nulls))
        assert str(e.value).startswith(f"{field}:") and "\n" not in str(e.value)
    doc = _doc(checkpoint, tmp_path / "s.zarr", {"random_init": 1})
    doc["model"]["trust_remote_code"] = True
    with pytest.raises(ConfigError, match=r"^model\.nulls: .*trust_remote_code.* remove `nulls:`"):
        config_from_dict(doc)
    doc = _doc(checkpoint, tmp_path / "s.zarr", {"random_init": 1})
    doc["models"] = [doc.pop("model"), {"path": str(checkpoint), "name": "llama.random_init.0"}]
    with pytest.raises(ConfigError, match=r"^models\[1\]\.name: .*also used by models\[0\]\.nulls"):
        config_from_dict(doc)


def test_dry_run_counts_the_nulls(checkpoint, tmp_path):
    from sweep.budget import size_sweep
    from sweep.plan.make import make_plan

    bare = size_sweep(make_plan(config_from_dict(_doc(checkpoint, tmp_path / "a.zarr"))), workers=1)
    nulls = size_sweep(make_plan(config_from_dict(
        _doc(checkpoint, tmp_path / "b.zarr", {"random_init": 2, "shuffled": 1, "sequences": 1}))),
        workers=1)
    assert nulls.blocks == bare.blocks * (1 + 3 / SEQS)          # 3 nulls on 1 of 2 sequences
    assert {r.model for r in nulls.rows} == {"llama", "llama.random_init.0", "llama.random_init.1",
                                            "llama.shuffled.0"}
    assert nulls.core_seconds > bare.core_seconds
    assert nulls.store_bytes > bare.store_bytes


def test_export_null_refusals_are_one_line(swept, tmp_path, capsys):
    root, _ = swept
    for args, text in (([str(root / "a.zarr"), "llama", str(tmp_path / "x")], "is a trained model"),
                       ([str(root / "a.zarr"), "nope", str(tmp_path / "x")], "is not a model of"),
                       ([str(tmp_path), NULLS[0], str(tmp_path / "x")], "is not a tdos store"),
                       ([str(root / "a.zarr"), NULLS[0], str(root / "export")], "not an empty directory")):
        assert main(["export-null", *args]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and text in err, err
    assert os.listdir(root / "export")                           # the earlier export is untouched


@pytest.mark.parametrize("kind", ["random_init", "shuffled", "gaussian", "shuffled_layers"])
@pytest.mark.parametrize("fmt", ["mamba", "mamba_ssm"])
def test_both_routes_make_the_same_mamba_null(tiny_checkpoints, fmt, kind):
    """A Mamba mixer's init writes its children's tensors (dt_proj's bias): the layer-local
    route, going down the layers, makes what the whole-model route makes, embedding rows and
    final norm included; HF and mamba_ssm formats alike."""
    from sweep.generic.local import LocalModel

    whole = _whole_null(tiny_checkpoints[fmt], kind, 1)
    lm = LocalModel(tiny_checkpoints[fmt], torch.float32, variant=Variant(kind, 1, "llama"))
    for layer in (2, 0, 1):
        lm.resident(layer)
        for k, p in lm.model.backbone.layers[layer].named_parameters():
            assert torch.equal(p, whole.backbone.layers[layer].get_parameter(k)), (layer, k)
    assert torch.equal(lm.model.backbone.norm_f.weight, whole.backbone.norm_f.weight)
    ids = torch.tensor([5, 3, 5, 9])
    lm.sequence(ids)
    assert torch.equal(lm.embedding.weight, whole.backbone.embeddings.weight[torch.unique(ids)])
