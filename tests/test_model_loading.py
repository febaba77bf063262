"""load_model: HF-format and mamba_ssm-format checkpoints load to the model they were saved from."""
from __future__ import annotations

import json

import pytest
import torch

from sweep.model import LoadedModel, load_model

ARCHS = ["mamba", "gpt2", "gpt_neox", "llama"]


def _hf_reference(path, arch, dtype):
    import transformers

    from sweep.model import _ARCHS

    kw = {} if arch == "mamba" else {"attn_implementation": "eager"}
    return getattr(transformers, _ARCHS[arch][0]).from_pretrained(str(path), dtype=dtype, **kw).eval()


@pytest.mark.parametrize("arch", ARCHS)
def test_loaded_model_matches_hf(tiny_checkpoints, arch):
    m = load_model(tiny_checkpoints[arch], dtype="float32")
    assert isinstance(m, LoadedModel) and m.arch == arch and m.dtype == torch.float32
    ref = _hf_reference(tiny_checkpoints[arch], arch, torch.float32)
    c = ref.config
    assert (m.n_layers, m.d_model, m.vocab_size) == (c.num_hidden_layers, c.hidden_size, c.vocab_size)
    assert m.max_length == (None if arch == "mamba" else 32)
    tokens = torch.randint(0, m.vocab_size, (10,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = ref(tokens[None], output_hidden_states=True)
        logits = m.hf(tokens[None]).logits
    torch.testing.assert_close(logits, out.logits, rtol=0, atol=0)
    # hidden_states(tokens, 0) is the embedding the HF model feeds its first block
    # (HF Mamba's hidden_states tuple starts after block 0, so take its embedding table)
    emb = ref.get_input_embeddings()(tokens) if arch == "mamba" else out.hidden_states[0][0]
    torch.testing.assert_close(m.hidden_states(tokens, 0), emb, rtol=0, atol=0)
    ident = m.identity
    assert ident["arch"] == arch and ident["path"] == str(tiny_checkpoints[arch]) and ident["revision"] is None
    assert ident["config"]["model_type"] == arch
    assert list(ident["weights_sha256"]) == ["model.safetensors"]
    assert len(ident["weights_sha256"]["model.safetensors"]) == 64
    json.dumps(ident)   # the identity goes into zarr attrs: must be plain JSON
    assert m.tokenizer() is None   # tiny checkpoints carry no tokenizer files


def test_mamba_hidden_states_through_our_blocks(tiny_checkpoints):
    m = load_model(tiny_checkpoints["mamba"], dtype="float64")
    assert all(p.dtype == torch.float64 for p in m.hf.parameters())
    tokens = torch.arange(9) % m.vocab_size
    ref = _hf_reference(tiny_checkpoints["mamba"], "mamba", torch.float64)
    with torch.no_grad():
        hs = ref(tokens[None], output_hidden_states=True).hidden_states
    # stock HF rounds the residual and the norm through fp32: agreement to fp32 precision
    # HF Mamba's hidden_states[i] is the output of block i, i.e. the input of layer i + 1
    for layer in range(1, m.n_layers):
        torch.testing.assert_close(m.hidden_states(tokens, layer), hs[layer - 1][0], rtol=1e-6, atol=1e-6)


def test_mamba_ssm_format_loads_same_weights(tiny_checkpoints):
    a = load_model(tiny_checkpoints["mamba"], dtype="float64")
    b = load_model(tiny_checkpoints["mamba_ssm"], dtype="float64")
    assert b.arch == "mamba" and b.vocab_size == a.vocab_size == 64
    sa, sb = a.hf.state_dict(), b.hf.state_dict()
    assert sorted(sa) == sorted(sb)
    for k in sa:
        assert sb[k].dtype == torch.float64
        torch.testing.assert_close(sb[k], sa[k], rtol=0, atol=0, msg=k)
    cfg_a, cfg_b = a.hf.config, b.hf.config
    for key in ("hidden_size", "num_hidden_layers", "state_size", "conv_kernel", "intermediate_size",
                "time_step_rank", "use_bias", "use_conv_bias", "residual_in_fp32", "layer_norm_epsilon"):
        assert getattr(cfg_b, key) == getattr(cfg_a, key), key
    assert list(b.identity["weights_sha256"]) == ["pytorch_model.bin"]
    tokens = torch.arange(7)
    torch.testing.assert_close(b.hidden_states(tokens, 2), a.hidden_states(tokens, 2), rtol=0, atol=0)


def test_missing_checkpoint_is_one_line(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        load_model(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(e.value) and "\n" not in str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(tmp_path / "empty")


def test_unsupported_model_type(tmp_path):
    from transformers import BertConfig, BertModel

    BertModel(BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32)).save_pretrained(tmp_path / "bert")
    with pytest.raises(ValueError) as e:
        load_model(tmp_path / "bert")
    msg = str(e.value)
    assert "'bert'" in msg and all(a in msg for a in ARCHS) and "\n" not in msg


def test_bad_dtype(tiny_checkpoints):
    with pytest.raises(ValueError, match="float16"):
        load_model(tiny_checkpoints["gpt2"], dtype="float16")
