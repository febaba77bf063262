"""load_model: HF-format and mamba_ssm-format checkpoints load to the model they were saved from."""
from __future__ import annotations

import json

import pytest
import torch

from sweep.checkpoint import HF_CLASSES, inspect_checkpoint
from sweep.errors import ConfigError
from sweep.model import LoadedModel, load_model

ARCHS = ["mamba", "gpt2", "gpt_neox", "llama"]


def _hf_reference(path, arch, dtype):
    import transformers

    kw = {} if arch == "mamba" else {"attn_implementation": "eager"}
    return getattr(transformers, HF_CLASSES[arch]).from_pretrained(str(path), dtype=dtype, **kw).eval()


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
    with pytest.raises(ConfigError) as e:
        load_model(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(e.value) and "\n" not in str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="config.json"):
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


# ---------------------------------------------------------------- one place for checkpoint facts

@pytest.mark.parametrize("arch", ARCHS + ["mamba_ssm"])
def test_validation_reads_what_the_loader_loads(tiny_checkpoints, arch):
    """inspect_checkpoint (config time, no weights) and load_model agree on every fact the
    plan and the store use."""
    info = inspect_checkpoint(str(tiny_checkpoints[arch]), None, "model.path")
    m = load_model(tiny_checkpoints[arch])
    assert info.local_dir == m.local_dir
    assert (info.arch, info.n_layers, info.d_model, info.max_length) == (m.arch, m.n_layers, m.d_model, m.max_length)
    assert info.block_params == sum(p.numel() for p in _block_module(m).parameters())
    assert info.weight_bytes == sum(f.stat().st_size for f in m.local_dir.iterdir()
                                    if f.suffix in (".safetensors", ".bin"))
    a_log = m.block(0).a_log()
    if a_log is None:
        assert info.d_inner is None and info.vocab_size == m.vocab_size
    else:
        assert (info.d_inner, info.d_state) == tuple(a_log.shape)
        # mamba_ssm pads its embedding: random ids come from the real vocabulary only
        assert info.vocab_size == (61 if arch == "mamba_ssm" else m.vocab_size)


def _block_module(m):
    from sweep.model import _layers

    return _layers(m.hf)[0]


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def _edit_config(d, **changes):
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(changes)
    (d / "config.json").write_text(json.dumps(cfg))


BROKEN = {  # name: (arch, damage(dir), message pattern)
    "truncated_safetensors": ("gpt2", lambda d: _truncate(d / "model.safetensors", 0.6),
                              r"model\.safetensors is truncated or corrupt \(\d+ bytes, its header needs \d+; "
                              r"an interrupted download\?\) — re-download"),
    "header_garbage": ("llama", lambda d: _overwrite(d / "model.safetensors", 8, b"{not json"),
                       r"model\.safetensors is truncated or corrupt \(header is not JSON"),
    "tiny_file": ("mamba", lambda d: (d / "model.safetensors").write_bytes(b"\x01\x02"),
                  r"model\.safetensors is truncated or corrupt \(2 bytes"),
    "no_weights": ("gpt2", lambda d: (d / "model.safetensors").unlink(),
                   r"no checkpoint weights \(\*\.safetensors, \*\.bin\) next to"),
    "config_json_garbage": ("gpt_neox", lambda d: (d / "config.json").write_text("{oops"),
                            r"cannot read .*config\.json: .* — fix or re-download"),
    "hidden_size_edited": ("gpt_neox", lambda d: _edit_config(d, hidden_size=48),
                           r"weights do not match config\.json: .* is \[\d+(, \d+)*\] in model\.safetensors, "
                           r"config\.json implies \[\d+(, \d+)*\] — fix config\.json"),
    "vocab_edited": ("mamba", lambda d: _edit_config(d, vocab_size=100),
                     r"backbone\.embeddings\.weight is \[64, 16\] in model\.safetensors, config\.json implies \[100, 16\]"),
    "deeper_config": ("llama", lambda d: _edit_config(d, num_hidden_layers=3),
                      r"tensor model\.layers\.2\.\S+ is in no weight file"),
    "shallower_config": ("gpt2", lambda d: _edit_config(d, n_layer=1),
                         r"transformer\.h\.1\.\S+ belongs to block 1, config\.json has 1 blocks"),
    "heads_inconsistent": ("gpt_neox", lambda d: _edit_config(d, num_attention_heads=5),
                           r"(inconsistent|do not match)"),
    "truncated_bin": ("mamba_ssm", lambda d: _truncate(d / "pytorch_model.bin", 0.5),
                      r"pytorch_model\.bin is truncated or corrupt \(.*\) — re-download"),
    "mamba_ssm_unsupported": ("mamba_ssm", lambda d: _edit_config(d, ssm_cfg={"layer": "Mamba2"}),
                              r"unsupported setting\(s\) \['ssm_cfg\.layer'\] — only Mamba-1"),
    "mamba_ssm_d_model": ("mamba_ssm", lambda d: _edit_config(d, d_model=24),
                          r"weights do not match config\.json"),
}


def _truncate(f, fraction):
    data = f.read_bytes()
    f.write_bytes(data[: int(len(data) * fraction)])


def _overwrite(f, offset, data):
    raw = bytearray(f.read_bytes())
    raw[offset: offset + len(data)] = data
    f.write_bytes(bytes(raw))


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_checkpoint_is_refused_before_loading(tiny_checkpoints, tmp_path, kind):
    arch, damage, pattern = BROKEN[kind]
    d = _copy(tiny_checkpoints[arch], tmp_path / arch)
    damage(d)
    with pytest.raises(ConfigError, match=r"^model\.path: .*" + pattern) as e:
        inspect_checkpoint(str(d), None, "model.path")
    assert "\n" not in str(e.value)
