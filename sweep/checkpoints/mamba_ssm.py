"""A mamba_ssm-format checkpoint directory (state-spaces/mamba-*, mamba2-*): config.json with
`d_model`, `n_layer`, `ssm_cfg`, mapped onto transformers' Mamba (Mamba-1 blocks) or Mamba2
(`ssm_cfg.layer: Mamba2`) without needing mamba_ssm installed. Its weights are those of a
transformers directory but for the embedding's name; its vocabulary is padded (ids beyond the
real one are never drawn)."""
from __future__ import annotations

import math

from sweep.checkpoints.directory import HfDirectory, root_cause, weight_files
from sweep.errors import ConfigError, first_line


class MambaSsmConfigError(ValueError):
    """A mamba_ssm config.json setting tdos cannot map onto transformers' Mamba blocks."""


class MambaSsmDirectory(HfDirectory):
    """A mamba_ssm checkpoint directory (module doc)."""

    format = "mamba_ssm"

    @staticmethod
    def claims(raw: dict) -> bool:
        return "model_type" not in raw and "d_model" in raw and "n_layer" in raw

    def config(self, where: str = "model.path", trust_remote_code: bool = False):
        try:
            return mamba_ssm_to_hf_config(self.raw)
        except MambaSsmConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        except Exception as e:  # transformers' own check of the config it was handed
            raise ConfigError(f"{where}: {self.path / 'config.json'}: bad mamba_ssm setting "
                              f"({first_line(root_cause(e))}) — fix config.json or re-download") from None

    def rename(self, key: str) -> str:
        # the two Mamba layouts differ only in the embedding's name
        return key.replace("backbone.embedding.", "backbone.embeddings.")

    def vocab_size(self, config) -> int:
        return self.raw["vocab_size"]           # the padded rows are never a token

    def load(self, dtype, trust_remote_code: bool = False):
        """The whole model: transformers' Mamba built on meta, the state dict assigned (the
        embedding renamed, the head tied as mamba_ssm ties it)."""
        import torch
        from transformers import AutoModelForCausalLM

        config = self.config()                       # MambaConfig or Mamba2Config
        sd = {self.rename(k): v.to(dtype) if v.is_floating_point() else v
              for k, v in self._state_dict().items()}
        if config.tie_word_embeddings or "lm_head.weight" not in sd:
            sd["lm_head.weight"] = sd["backbone.embeddings.weight"]
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        missing, unexpected = model.load_state_dict(sd, strict=False, assign=True)
        if missing or unexpected:
            raise ValueError(f"{self.path}: mamba_ssm weights do not match the config: missing "
                             f"{missing}, unexpected {unexpected}")
        if config.tie_word_embeddings:
            model.lm_head.weight = model.backbone.embeddings.weight   # one tensor, as transformers ties
        return model

    def _state_dict(self) -> dict:
        import torch

        sd = {}
        for f in weight_files(self.path):
            if f.suffix == ".safetensors":
                from safetensors.torch import load_file

                sd.update(load_file(str(f)))
            else:
                sd.update(torch.load(f, map_location="cpu", weights_only=True))
        if not sd:
            raise FileNotFoundError(f"no checkpoint weights in {self.path}: looked for "
                                    f"*.safetensors, pytorch_model.bin")
        return sd


def mamba_ssm_to_hf_config(cfg: dict):
    """mamba_ssm config.json dict -> transformers MambaConfig (Mamba-1 blocks) or Mamba2Config
    (Mamba-2 blocks, ssm_cfg.layer "Mamba2": state-spaces/mamba2-*)."""
    ssm = dict(cfg.get("ssm_cfg") or {})
    layer = ssm.get("layer", "Mamba1")
    unsupported = {
        "ssm_cfg.layer": layer not in ("Mamba1", "Mamba2"),
        "rms_norm": not cfg.get("rms_norm", True),
        "d_intermediate": cfg.get("d_intermediate", 0) != 0,
        "attn_layer_idx": bool(cfg.get("attn_layer_idx")),
        # Mamba-2 variants transformers' Mamba2 block does not have
        "ssm_cfg.d_ssm": ssm.get("d_ssm") is not None,
        "ssm_cfg.D_has_hdim": bool(ssm.get("D_has_hdim", False)),
        "ssm_cfg.rmsnorm": not ssm.get("rmsnorm", True),
        "ssm_cfg.norm_before_gate": bool(ssm.get("norm_before_gate", False)),
    }
    bad = [k for k, v in unsupported.items() if v]
    if bad:
        raise MambaSsmConfigError(f"mamba_ssm config: unsupported setting(s) {bad} — only Mamba-1 and "
                         f"Mamba-2 RMSNorm blocks without MLP or attention layers load")
    for key in ("d_model", "n_layer", "vocab_size"):
        if not isinstance(cfg.get(key), int) or isinstance(cfg.get(key), bool) or cfg[key] < 1:
            raise MambaSsmConfigError(f"mamba_ssm config: {key} must be a positive integer, got "
                             f"{cfg.get(key)!r} — fix config.json")
    mult = cfg.get("pad_vocab_size_multiple", 1)
    d = cfg["d_model"]
    common = dict(vocab_size=cfg["vocab_size"] + (-cfg["vocab_size"]) % mult, hidden_size=d,
                  num_hidden_layers=cfg["n_layer"], conv_kernel=ssm.get("d_conv", 4),
                  expand=ssm.get("expand", 2), use_bias=ssm.get("bias", False),
                  use_conv_bias=ssm.get("conv_bias", True),
                  layer_norm_epsilon=cfg.get("norm_epsilon", 1e-5),
                  residual_in_fp32=cfg.get("residual_in_fp32", True),
                  tie_word_embeddings=cfg.get("tie_embeddings", True))
    if layer == "Mamba2":
        from transformers import Mamba2Config

        head_dim = ssm.get("headdim", 64)
        return Mamba2Config(**common, state_size=ssm.get("d_state", 128), head_dim=head_dim,
                            num_heads=common["expand"] * d // head_dim,
                            n_groups=ssm.get("ngroups", 1), chunk_size=ssm.get("chunk_size", 256),
                            time_step_limit=tuple(ssm.get("dt_limit", (0.0, float("inf")))))
    from transformers import MambaConfig

    dt_rank = ssm.get("dt_rank", "auto")
    return MambaConfig(**common, state_size=ssm.get("d_state", 16),
                       time_step_rank=math.ceil(d / 16) if dt_rank == "auto" else dt_rank)
