"""GGUF files as checkpoints (sweep/checkpoints/gguf_file.py, docs/models.md "GGUF files").

Tiny LLaMA, Qwen2 and Mamba models (4 layers) are written as GGUF files by the `gguf`
package's writer (tests/gguf_files.py) and swept layer-local at the deepest layer, in float64,
beside its twin: the safetensors checkpoint of what transformers' own whole-file GGUF loader
reads from it (its config and its dequantized float32 weights). For LLaMA and Qwen2 the twin's
weights are the original checkpoint's, bit for bit (its config differs only where GGUF stores
a float in 32 bits: rms_norm_eps); Mamba's A is stored as -exp(A_log) in float32, and a Q8_0
file holds its dequantized weights. The two sweeps' J_tt spectra and ‖J_tt‖_F² are equal to
the last bit: the layer-local reader dequantizes a layer's tensors exactly as
transformers does, through the fast LLaMA and Mamba paths, the generic path and the nulls.
A qwen3 file, which transformers' own loader reads with the wrong head_dim, sweeps as its
original checkpoint.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import zarr
from conftest import local_client
from families import DEEPEST, tiny_model
from gguf_files import write_gguf

from sweep.config.load import config_from_dict
from sweep.run import run_sweep

SEQS, L = 2, 6


def twin(gguf, out):
    """The safetensors checkpoint of what transformers' own GGUF loader reads from `gguf`
    (float32, every tensor dequantized) in directory `out`."""
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    out.mkdir()
    config = m.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(out)
    save_model(m, str(out / "model.safetensors"))
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    gen = torch.Generator().manual_seed(1)
    out = {}
    for name in ("llama", "qwen2", "mamba"):
        model = tiny_model(name, gen)
        out[name] = write_gguf(model, root / f"{name}.gguf")
        out[f"{name}-ckpt"] = twin(out[name], root / f"{name}-twin")
        if name != "mamba":          # an F32 file holds the checkpoint's weights exactly
            _assert_same_weights(model, out[f"{name}-ckpt"])
    out["llama-q8"] = write_gguf(tiny_model("llama", gen), root / "llama-q8.gguf", "Q8_0")
    out["llama-q8-ckpt"] = twin(out["llama-q8"], root / "llama-q8-twin")
    out["qwen3-model"] = model = tiny_model("qwen3", gen)
    model.save_pretrained(root / "qwen3")
    out["qwen3"], out["qwen3-ckpt"] = write_gguf(model, root / "qwen3.gguf"), root / "qwen3"
    return out


def _assert_same_weights(model, ckpt) -> None:
    from safetensors.torch import load_file

    saved = load_file(str(ckpt / "model.safetensors"))
    for k, v in model.state_dict().items():
        if k in saved:
            assert torch.equal(saved[k], v), k


@pytest.fixture(scope="module")
def one_worker():
    with local_client(1) as c:
        yield c


def _sweep(files, names, store, client):
    models = []
    for n in names:
        nulls = {"random_init": 1, "shuffled": 1} if n == "llama" else None
        for key, suffix in ((n, "gguf"), (f"{n}-ckpt", "ckpt")):
            models.append({"path": str(files[key]), "dtype": "float64", "name": f"{n}-{suffix}",
                           **({"nulls": nulls} if nulls else {})})
    cfg = config_from_dict({"models": models, "inputs": {"sequences": SEQS, "length": L, "seed": 3},
                            "layers": [DEEPEST], "store": str(store),
                            "compute": {"token_block": 4, "live_every": 0}})
    result = run_sweep(cfg, client=client, progress=False)
    assert result.exit_code == 0, result.errors
    return cfg, result


def _assert_same(store, a: str, b: str) -> None:
    ga, gb = (zarr.open_group(store, path=g, mode="r") for g in (a, b))
    np.testing.assert_array_equal(ga["tokens"][...], gb["tokens"][...])
    for array in ("eigenvalues", "frobenius2", "residual"):
        if array in ga:
            np.testing.assert_array_equal(ga[array][...], gb[array][...], err_msg=f"{a} {array}")


def test_a_gguf_sweeps_as_its_checkpoint_at_the_deepest_layer(files, one_worker, tmp_path):
    """Fast LLaMA and Mamba paths, the generic path (Qwen2, Qwen3), a Q8_0 file and LLaMA's
    nulls; transformers 5.25 reads every qwen3 GGUF with head_dim 128, tdos the file's
    key_length (8 here): its sweep agrees with the original checkpoint's up to the float32
    rounding of rms_norm_eps in the file's metadata (no twin: transformers' own loader fails
    on this file)."""
    from sweep.plan.checkpoint import inspect_checkpoint

    names = ("llama", "qwen2", "mamba", "llama-q8", "qwen3")
    cfg, result = _sweep(files, names, tmp_path / "s.zarr", one_worker)
    assert {r["route"] for r in result.results if "route" in r} == {"layer-local"}
    paths = {(r["model"], r["jacobian_path"]) for r in result.results if "block" in r}
    assert ("llama-gguf", "hand-written") in paths and ("qwen2-gguf", "generic") in paths
    for n in ("llama", "qwen2", "mamba", "llama-q8"):
        _assert_same(cfg.store, f"{n}-gguf", f"{n}-ckpt")
    for null in ("random_init.0", "shuffled.0"):
        _assert_same(cfg.store, f"llama-gguf.{null}", f"llama-ckpt.{null}")
    eig = zarr.open_group(cfg.store, path="llama-gguf", mode="r")["eigenvalues"][...]
    assert np.isfinite(eig).all() and np.abs(eig).max() > 0
    qwen3 = files["qwen3-model"].model.layers[0]
    assert inspect_checkpoint(str(files["qwen3"]), None, "model.path").block_params == \
        sum(p.numel() for p in qwen3.parameters())
    got, want = (zarr.open_group(cfg.store, path=g, mode="r")["frobenius2"][...]
                 for g in ("qwen3-gguf", "qwen3-ckpt"))
    np.testing.assert_allclose(got, want, rtol=1e-9)
