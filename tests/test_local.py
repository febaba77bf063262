"""One decoder layer resident (sweep/generic/local.py) against the whole model.

For every tested family, float64 and float32: J_tt and the layer's outputs by the model's own
decoding with only layer l materialised (the layers before it stand-ins, its input the
residual h_l fed from outside) equal the whole-model route's; the residual streamed one layer
at a time equals the hidden states of transformers' own whole-model forward. Families whose
MoE experts transformers fuses on load get them converted per layer by its own loader. A
sharded checkpoint (several safetensors files and the index) reads only the resident
layer's tensors; a mamba_ssm .bin checkpoint is read memory-mapped under from_pretrained's
names.
"""
from __future__ import annotations

import json

import pytest
import torch
from families import DEEPEST, FAMILIES, MIDDLE, tolerance
from oracle import layer_output, oracle_model

from sweep.generic.decode import LayerJacobians
from sweep.generic.local import LocalModel, NotLocal
from sweep.plan.layers import decoder_layers
from sweep.worker.model import load_model, prepare

L = 7


def _ids(seed: int = 1) -> torch.Tensor:
    return torch.randint(3, 90, (L,), generator=torch.Generator().manual_seed(seed))


def _hidden_states(hf, ids) -> list[torch.Tensor]:
    """The input of every decoder layer in transformers' own whole-sequence forward."""
    seen = {}

    def take(i):
        def hook(module, args, kwargs):
            seen.setdefault(i, (args[0] if args else kwargs["hidden_states"])[0].detach().clone())
        return hook

    hooks = [m.register_forward_pre_hook(take(i), with_kwargs=True)
             for i, m in enumerate(decoder_layers(hf))]
    with torch.no_grad():
        hf(ids[None], use_cache=False)
    for h in hooks:
        h.remove()
    return [seen[i] for i in range(len(seen))]


def _local(path, dtype=torch.float64) -> LocalModel:
    lm = LocalModel(path, dtype)
    prepare(lm.model, dtype)
    return lm


# float32: the same operations on both routes; the bounds leave room for a kernel that
# reduces in another order when the sequence reaches it in pieces
BOUNDS = {"float64": (1e-12, None), "float32": (1e-6, 1e-4)}


@pytest.mark.parametrize("dtype", sorted(BOUNDS))
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_one_resident_layer_equals_the_whole_model(family_checkpoints, family, dtype):
    path = family_checkpoints[family]
    whole = load_model(path, dtype=dtype)
    ids = _ids()
    lm = _local(path, getattr(torch, dtype))
    h_bound, j_bound = BOUNDS[dtype]
    stream = lm.stream(ids, lm.n_layers)
    assert len(stream) == lm.n_layers + 1
    for got, want in zip(stream, _hidden_states(whole.hf, ids)):
        torch.testing.assert_close(got, want, rtol=0, atol=h_bound * float(want.abs().max()))
    for layer in (0, MIDDLE, DEEPEST):          # no, 2 and 3 stand-ins before it
        want = LayerJacobians(whole.hf, layer, fresh=whole.fresh).run(ids, 0, L)
        lm.resident(layer)
        lm.sequence(ids, want.inputs)             # the whole model's own decode inputs
        with lm.injected():
            got = LayerJacobians(lm.model, layer, fresh=lm.fresh, on_forward=lm.at).run(ids, 0, L)
        for a, b in ((got.jac, want.jac), (got.outputs, want.outputs)):
            assert float((a - b).abs().max() / b.abs().max()) <= (j_bound or tolerance(family)), (family, layer)
    if dtype == "float64":                        # the deepest layer's output, as the oracle's
        want = layer_output(oracle_model(path), DEEPEST, ids)
        assert float((got.outputs - want).abs().max() / want.abs().max()) <= tolerance(family), family


def test_a_sharded_checkpoint_reads_only_the_resident_layer(tmp_path):
    from families import FAMILIES as configs
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(configs["llama"]())
    model.save_pretrained(tmp_path / "sharded", max_shard_size="40KB")
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2
    layer_bytes = sum(p.numel() * p.element_size() for p in decoder_layers(model)[1].parameters())

    lm = _local(tmp_path / "sharded", torch.float32)
    ids = _ids(2)
    lm.sequence(ids)
    lm.resident(0)
    before = lm.ckpt.read_bytes
    lm.resident(1)
    assert lm.ckpt.read_bytes - before == layer_bytes
    assert all(p.device.type == "meta" for p in lm._real[0].parameters())
    whole = load_model(tmp_path / "sharded", dtype="float32")
    for got, want in zip(lm.stream(ids, 2), _hidden_states(whole.hf, ids)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6 * float(want.abs().max()))


def test_a_mamba_ssm_bin_checkpoint_runs_layer_local(tiny_checkpoints):
    """mamba_ssm's own layout (pytorch_model.bin, its names): tensors read from the
    memory-mapped .bin by the names from_pretrained's mapping gives them."""
    path = tiny_checkpoints["mamba_ssm"]
    whole = load_model(path, dtype="float64")
    lm = _local(path)
    ids = _ids(3)
    for got, want in zip(lm.stream(ids, lm.n_layers), _hidden_states(whole.hf, ids)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12 * float(want.abs().max()))
    assert lm.ckpt.files_read == {"pytorch_model.bin"}
    layer = lm.n_layers - 1
    want = LayerJacobians(whole.hf, layer, fresh=whole.fresh).run(ids, 0, L)
    lm.resident(layer)
    lm.sequence(ids, want.inputs)
    with lm.injected():
        got = LayerJacobians(lm.model, layer, fresh=lm.fresh, on_forward=lm.at).run(ids, 0, L)
    assert float((got.jac - want.jac).abs().max() / want.jac.abs().max()) <= 1e-12


def test_an_rwkv_that_rescales_its_weights_is_swept_whole(tmp_path):
    """RWKV divides layer j's output weights by 2^(j // rescale_every) on its first eval
    forward: with rescale_every below its depth, one layer read alone would not be the layer
    the model computes with, so the plan gives it the whole model and says why."""
    from transformers import AutoModelForCausalLM

    from sweep.plan.checkpoint import inspect_checkpoint

    config = FAMILIES["rwkv"]()
    config.num_hidden_layers, config.rescale_every = 4, 2
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "rwkv")
    with pytest.raises(NotLocal, match="RWKV rescales its layers' weights"):
        LocalModel(tmp_path / "rwkv", torch.float64)
    info = inspect_checkpoint(str(tmp_path / "rwkv"), None, "model.path")
    assert info.not_local.startswith("RWKV rescales its layers' weights in place")
    config.rescale_every = 0                             # never rescales: one layer at a time
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "rwkv0")
    assert inspect_checkpoint(str(tmp_path / "rwkv0"), None, "model.path").not_local == ""
