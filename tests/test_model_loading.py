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
    assert all(p.dtype == torch.float64 for p in vars(m.block(0)).values() if isinstance(p, torch.Tensor))
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
        assert sb[k].dtype == sa[k].dtype == torch.float32    # the checkpoints' precision
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


# ---------------------------------------------------------------- storage vs compute dtype

def _ops_on(hf_model, arch, layer):
    """BlockOps built directly on a transformers model (no LoadedModel in between)."""
    import importlib

    from sweep.model import _ARCHS

    module, cls = _ARCHS[arch][1].split(":")
    return getattr(importlib.import_module(module), cls)(hf_model, layer)


@pytest.mark.parametrize("arch", ARCHS)
def test_fp64_blocks_from_fp32_storage_equal_a_whole_model_cast(tiny_checkpoints, arch):
    """Weights stay fp32 (half the memory); every block, embedding and J_tt is bit for bit
    what a model loaded entirely in fp64 by transformers gives."""
    m = load_model(tiny_checkpoints[arch], dtype="float64")
    assert m.storage_dtype == torch.float32 and m.dtype == torch.float64
    stored = [p.data_ptr() for p in m.hf.parameters()]
    ref = _hf_reference(tiny_checkpoints[arch], arch, torch.float64)
    tokens = torch.arange(12) % m.vocab_size
    h = m.hidden_states(tokens, 1)
    assert h.dtype == torch.float64
    ref_ops = [_ops_on(ref, arch, layer) for layer in range(m.n_layers)]
    h_ref = ref.get_input_embeddings()(tokens)
    if arch == "gpt2":
        h_ref = h_ref + ref.transformer.wpe(torch.arange(12))
    torch.testing.assert_close(h, ref_ops[0].forward(h_ref), rtol=0, atol=0)
    for layer in range(m.n_layers):
        J = m.block(layer).jacobians(h, 4, 12)
        assert J.dtype == torch.float64
        torch.testing.assert_close(J, ref_ops[layer].jacobians(h, 4, 12), rtol=0, atol=0)
    # each layer got its stored (memory-mapped) tensors back, not fp32 copies of the widening
    assert [p.data_ptr() for p in m.hf.parameters()] == stored
    assert all(p.dtype == torch.float32 for p in m.hf.parameters())


def test_only_blocks_in_use_are_widened(tmp_path):
    from transformers import MambaConfig, MambaForCausalLM

    from sweep.model import BLOCK_CACHE

    torch.manual_seed(0)
    MambaForCausalLM(MambaConfig(vocab_size=64, hidden_size=16, num_hidden_layers=5, state_size=4,
                                 time_step_rank=2)).save_pretrained(tmp_path / "m")
    m = load_model(tmp_path / "m", dtype="float64")
    m.hidden_states(torch.arange(6), 5)
    swept = m.block(2)
    assert len(m._blocks) == BLOCK_CACHE < m.n_layers
    assert m.block(2) is swept                                   # the block in use stays built


def test_half_precision_checkpoint_is_kept_half_and_computed_exactly(tmp_path):
    """An fp16 GPT-NeoX checkpoint swept in fp32 is stored fp16; its fp32 blocks equal those
    of transformers' own fp32 load (fp16 -> fp32 is exact)."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from sweep.model import checkpoint_dtypes

    torch.manual_seed(0)
    cfg = GPTNeoXConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=32, rotary_pct=0.5)
    GPTNeoXForCausalLM(cfg).half().save_pretrained(tmp_path / "neox16")
    assert checkpoint_dtypes(tmp_path / "neox16") == {torch.float16}
    m = load_model(tmp_path / "neox16", dtype="float32")
    assert m.storage_dtype == torch.float16
    ref = _hf_reference(tmp_path / "neox16", "gpt_neox", torch.float32)
    h = m.hidden_states(torch.arange(10), 1)
    torch.testing.assert_close(m.block(1).jacobians(h, 0, 10), _ops_on(ref, "gpt_neox", 1).jacobians(h, 0, 10),
                               rtol=0, atol=0)


@pytest.mark.parametrize("found, compute, expected", [
    ({torch.float32}, torch.float64, torch.float32),
    ({torch.float64}, torch.float64, torch.float64),
    ({torch.float64}, torch.float32, torch.float32),        # the user asked for fp32: one rounding
    ({torch.bfloat16, torch.float32}, torch.float64, torch.float32),
    ({torch.bfloat16}, torch.float32, torch.bfloat16),
    ({torch.bfloat16, torch.float16}, torch.float32, torch.float32),   # neither holds the other
    (set(), torch.float32, torch.float32),
])
def test_storage_dtype_holds_every_weight_exactly(found, compute, expected):
    from sweep.model import storage_dtype

    assert storage_dtype(found, compute) == expected


def test_checkpoint_dtypes_of_a_torch_bin(tiny_checkpoints):
    from sweep.model import checkpoint_dtypes

    assert checkpoint_dtypes(tiny_checkpoints["mamba_ssm"]) == {torch.float32}
