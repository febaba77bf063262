"""configs/qwen3-0.6b.yaml and configs/mamba2-370m.yaml sweep and analyse: each with a
random-init checkpoint of its model's shape (the hub config's depth, widths, heads and state;
a 2,048-token vocabulary instead of the real one, which only sizes the embedding) in the
model's own format — transformers' for Qwen3, mamba_ssm's for Mamba-2 — in place of the hub
id, random token ids for the dataset (no hub here), one short block of the representative
layer."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 2048


def _qwen3(path: Path) -> None:
    import transformers as T

    cfg = T.Qwen3Config(vocab_size=VOCAB, hidden_size=1024, intermediate_size=3072,
                        num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                        head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6,
                        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
                        tie_word_embeddings=True)
    T.Qwen3ForCausalLM(cfg).save_pretrained(path)


def _mamba2_ssm(path: Path) -> None:
    """state-spaces/mamba2-370m's config.json (but the vocabulary) and mamba_ssm key names."""
    import transformers as T

    from sweep.checkpoints.mamba_ssm import mamba_ssm_to_hf_config

    raw = {"d_model": 1024, "d_intermediate": 0, "n_layer": 48, "vocab_size": VOCAB,
           "ssm_cfg": {"layer": "Mamba2"}, "attn_layer_idx": [], "attn_cfg": {}, "rms_norm": True,
           "residual_in_fp32": True, "fused_add_norm": True, "pad_vocab_size_multiple": 16,
           "tie_embeddings": True}
    model = T.Mamba2ForCausalLM(mamba_ssm_to_hf_config(raw))
    path.mkdir()
    (path / "config.json").write_text(json.dumps(raw))
    torch.save({k.replace("backbone.embeddings.", "backbone.embedding."): v
                for k, v in model.state_dict().items() if k != "lm_head.weight"},
               path / "pytorch_model.bin")


@pytest.mark.parametrize("config,make,kind,layer", [
    ("qwen3-0.6b.yaml", _qwen3, "attention", 14), ("mamba2-370m.yaml", _mamba2_ssm, "mamba2", 24)])
def test_shipped_config_sweeps_and_analyses(tmp_path, capsys, config, make, kind, layer):
    from analysis import open_store
    from sweep.cli import main

    doc = yaml.safe_load((ROOT / "configs" / config).read_text())
    torch.manual_seed(0)
    make(tmp_path / "model")
    doc["model"]["path"] = str(tmp_path / "model")
    doc["inputs"] = {"sequences": 1, "length": 4, "seed": 0}
    doc["layers"] = {layer: 4}
    doc["store"] = str(tmp_path / "run.zarr")
    doc["compute"] = {"token_block": 4, "live_every": 0}
    doc["cluster"] = {"workers": 1}
    doc["analysis"] = {**doc["analysis"], "lengths": [4], "n_boot": 50}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(doc))
    assert main(["sweep", str(tmp_path / "run.yaml")]) == 0
    assert "J_tt: generic (1 block)" in capsys.readouterr().out
    st = open_store(doc["store"])
    assert st.layer_kind(layer) == kind and st.d_model == 1024
    assert (st.jacobian_path(layer) == "generic").all()
    if kind == "mamba2":
        assert st.delta(layer, 0).shape == (4, 32) and st.intrinsic_rates(layer).shape == (32,)
    assert main(["analyze", doc["store"], "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "report.md").is_file()
