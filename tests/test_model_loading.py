"""load_model: HF-format and mamba_ssm-format checkpoints load to the model they were saved
from, in the compute dtype, with tdos' attention function and (float64) eager experts."""
from __future__ import annotations

import json

import pytest
import torch

from sweep.errors import ConfigError
from sweep.plan.checkpoint import inspect_checkpoint
from sweep.worker.model import LoadedModel, load_model

ARCHS = ["mamba", "gpt2", "gpt_neox", "llama"]


def _hf_reference(path, dtype):
    """transformers' own load of the checkpoint, its default attention."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype).eval()


@pytest.mark.parametrize("arch", ARCHS)
def test_loaded_model_matches_hf(tiny_checkpoints, arch):
    m = load_model(tiny_checkpoints[arch], dtype="float64")
    assert isinstance(m, LoadedModel) and m.arch == arch and m.dtype == torch.float64
    assert all(p.dtype == torch.float64 for p in m.hf.parameters())
    ref = _hf_reference(tiny_checkpoints[arch], torch.float64)
    c = ref.config
    assert (m.n_layers, m.d_model, m.vocab_size) == (c.num_hidden_layers, c.hidden_size, c.vocab_size)
    if arch != "mamba":
        assert m.hf.config._attn_implementation == "tdos"
    tokens = torch.randint(0, m.vocab_size, (10,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = ref(tokens[None]).logits
        got = m.hf(tokens[None]).logits
    # tdos' attention function in place of sdpa: the same values to float64 rounding
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    # embed(tokens) is the input of layer 0 (GPT-2's learned positions included)
    seen = []
    from sweep.plan.layers import decoder_layers

    h = decoder_layers(ref)[0].register_forward_pre_hook(lambda mod, args: seen.append(args[0]))
    with torch.no_grad():
        ref(tokens[None])
    h.remove()
    torch.testing.assert_close(m.embed(tokens), seen[0][0], rtol=0, atol=0)
    ident = m.identity
    assert ident["arch"] == arch and ident["path"] == str(tiny_checkpoints[arch]) and ident["revision"] is None
    assert ident["config"]["model_type"] == arch
    assert sorted(ident["files_sha256"]) == ["config.json", "model.safetensors"]
    assert all(len(v) == 64 for v in ident["files_sha256"].values())
    json.dumps(ident)   # the identity goes into zarr attrs: must be plain JSON
    assert m.tokenizer() is None   # tiny checkpoints carry no tokenizer files


def test_mamba_ssm_format_loads_same_weights(tiny_checkpoints):
    a = load_model(tiny_checkpoints["mamba"], dtype="float64")
    b = load_model(tiny_checkpoints["mamba_ssm"], dtype="float64")
    assert b.arch == "mamba" and b.vocab_size == a.vocab_size == 64
    sa, sb = a.hf.state_dict(), b.hf.state_dict()
    assert sorted(sa) == sorted(sb)
    for k in sa:
        assert sb[k].dtype == sa[k].dtype == torch.float64    # the compute dtype
        torch.testing.assert_close(sb[k], sa[k], rtol=0, atol=0, msg=k)
    cfg_a, cfg_b = a.hf.config, b.hf.config
    for key in ("hidden_size", "num_hidden_layers", "state_size", "conv_kernel", "intermediate_size",
                "time_step_rank", "use_bias", "use_conv_bias", "residual_in_fp32", "layer_norm_epsilon"):
        assert getattr(cfg_b, key) == getattr(cfg_a, key), key
    assert sorted(b.identity["files_sha256"]) == ["config.json", "pytorch_model.bin"]
    tokens = torch.arange(7)[None]
    with torch.no_grad():
        torch.testing.assert_close(b.hf(tokens).logits, a.hf(tokens).logits, rtol=0, atol=0)


def test_mamba2_in_mamba_ssm_format_loads_as_transformers_mamba2(tmp_path):
    """state-spaces/mamba2-* checkpoints: mamba_ssm's config.json (ssm_cfg.layer Mamba2) and
    key names, written here from a transformers Mamba2 model; same logits, Mamba-2 layers."""
    import transformers as T

    cfg = T.Mamba2Config(vocab_size=61, hidden_size=16, num_hidden_layers=2, state_size=8,
                         expand=2, head_dim=8, num_heads=4, n_groups=1, chunk_size=8,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    hf = T.Mamba2ForCausalLM(cfg).eval()
    d = tmp_path / "mamba2-ssm"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "d_model": 16, "n_layer": 2, "vocab_size": 61, "pad_vocab_size_multiple": 1,
        "ssm_cfg": {"layer": "Mamba2", "d_state": 8, "d_conv": 4, "expand": 2, "headdim": 8,
                    "ngroups": 1, "chunk_size": 8},
        "rms_norm": True, "residual_in_fp32": True, "fused_add_norm": True, "tie_embeddings": True}))
    torch.save({k.replace("backbone.embeddings.", "backbone.embedding."): v.clone()
                for k, v in hf.state_dict().items() if k != "lm_head.weight"}, d / "pytorch_model.bin")
    info = inspect_checkpoint(str(d), None, "model.path")
    assert [k.kind for k in info.kinds] == ["mamba2", "mamba2"] and info.kinds[0].a_log_shape == (4,)
    m = load_model(d, dtype="float32")
    tokens = torch.arange(9)[None] % 61
    with torch.no_grad():
        torch.testing.assert_close(m.hf(tokens).logits, hf(tokens).logits, rtol=0, atol=0)


def test_float64_moe_runs_transformers_eager_experts(tmp_path):
    """The grouped expert matmul has no float64 kernel: a float64 sweep uses transformers'
    eager experts (never a silent downcast); float32 keeps the default."""
    import transformers as T

    cfg = T.MixtralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                          num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                          num_experts_per_tok=2)
    T.MixtralForCausalLM(cfg).save_pretrained(tmp_path / "moe")
    m64 = load_model(tmp_path / "moe", dtype="float64")
    assert m64.hf.config._experts_implementation == "eager"
    with torch.no_grad():
        out = m64.hf(torch.arange(5)[None]).logits
    assert out.dtype == torch.float64 and torch.isfinite(out).all()
    assert load_model(tmp_path / "moe", dtype="float32").hf.config._experts_implementation != "eager"


def test_missing_checkpoint_is_one_line(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_model(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(e.value) and "\n" not in str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="config.json"):
        load_model(tmp_path / "empty")


def test_bad_dtype(tiny_checkpoints):
    with pytest.raises(ValueError, match="float16"):
        load_model(tiny_checkpoints["gpt2"], dtype="float16")


# ---------------------------------------------------------------- one place for checkpoint facts

@pytest.mark.parametrize("arch", ARCHS + ["mamba_ssm"])
def test_validation_reads_what_the_loader_loads(tiny_checkpoints, arch):
    """inspect_checkpoint (config time, no weights) and load_model agree on every fact the
    plan and the store use."""
    from sweep.plan.layers import decoder_layers

    info = inspect_checkpoint(str(tiny_checkpoints[arch]), None, "model.path")
    m = load_model(tiny_checkpoints[arch])
    assert info.local_dir == m.local_dir
    assert (info.arch, info.n_layers, info.d_model) == (m.arch, m.n_layers, m.d_model)
    assert info.max_length == (None if arch.startswith("mamba") else 32)
    assert info.kinds == m.kinds                          # meta-device kinds = the real model's
    assert info.block_params == max(sum(p.numel() for p in layer.parameters())
                                    for layer in decoder_layers(m.hf))
    assert info.n_params == sum(p.numel() for p in m.hf.parameters())
    assert info.weight_bytes == sum(f.stat().st_size for f in m.local_dir.iterdir()
                                    if f.suffix in (".safetensors", ".bin"))
    a_log = m.a_log(0)
    if a_log is None:
        assert info.ssm_layers == () and info.vocab_size == m.vocab_size
    else:
        assert all(k.a_log_shape == tuple(a_log.shape) for k in info.kinds)
        # mamba_ssm pads its embedding: random ids come from the real vocabulary only
        assert info.vocab_size == (61 if arch == "mamba_ssm" else m.vocab_size)


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
    "mamba_ssm_unsupported": ("mamba_ssm", lambda d: _edit_config(d, ssm_cfg={"layer": "Mamba3"}),
                              r"unsupported setting\(s\) \['ssm_cfg\.layer'\] — only Mamba-1 and "
                              r"Mamba-2"),
    "mamba_ssm_as_mamba2": ("mamba_ssm", lambda d: _edit_config(d, ssm_cfg={"layer": "Mamba2",
                                                                          "d_state": 4}),
                            r"config\.json: bad mamba_ssm setting \(.*num_heads \* head_dim"),
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
