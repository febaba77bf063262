"""What a checkpoint's config.json describes: the transformers config, whether tdos can sweep
it, and its shape (layers, width, the kind of every layer) from a model built on the meta
device, without any weights.

Any decoder-only causal LM that `AutoModelForCausalLM` builds is accepted. Refused, each in
one line before anything runs: encoder–decoder models, encoder-only (bidirectional)
models, multimodal wrappers, and checkpoints whose code is not in transformers unless
`model.trust_remote_code: true`. mamba_ssm-format directories (state-spaces/mamba-*) map
onto transformers' MambaConfig.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from sweep.errors import ConfigError
from sweep.plan.layers import LayerKind, decoder_layers, layer_kinds

# sub-configs that make a config a multimodal wrapper around a text decoder
_MODALITIES = ("vision_config", "audio_config", "speech_config", "vision_tower_config")

# the model types with a kept hand-written J_tt: the plan's engine under compute.engine auto.
# sweep/blocks/__init__.py FAST holds their classes (torch); tests/test_layers.py holds the two equal
FAST_ARCHS = ("gpt2", "gpt_neox", "llama", "mamba")

@dataclass(frozen=True)
class ModelInfo:
    """What the plan needs of a checkpoint, read without loading any weights."""

    arch: str                          # config.json model_type ("mamba" for mamba_ssm format)
    n_layers: int
    d_model: int
    max_length: int | None             # positions the model embeds; None when unbounded
    vocab_size: int                    # random token ids are drawn from [0, vocab_size)
    kinds: tuple[LayerKind, ...] = ()  # one per decoder layer
    local_dir: Path | None = None
    weight_bytes: int = 0              # bytes of the weight files
    block_params: int = 0              # parameters of the largest decoder layer
    n_params: int = 0                  # parameters of the whole model (tied ones once)
    shared_params: int = 0             # parameters outside the decoder layers and embeddings
    not_local: str = ""                # why a worker must load the whole model (empty: one layer)

    @property
    def ssm_layers(self) -> tuple[int, ...]:
        return tuple(i for i, k in enumerate(self.kinds) if k.ssm)


class Source(NamedTuple):
    """Where from_pretrained takes one of the model's tensors from (a weight file's tensor,
    or a GGUF's: sweep/plan/checkpoint.py checkpoint_names, sweep/plan/gguf_file.py)."""

    shape: tuple[int, ...] | None     # None: a converter builds it (no shape to compare)
    file: str                         # weight file name
    key: str                          # the tensor's name in that file
    converted: bool = False           # built by a converter (fused MoE experts)
    parts: tuple[tuple[str, str], ...] = ()   # converted: every (file, key) the converter reads


def hf_config(raw: dict, local: Path, where: str, trust_remote_code: bool = False):
    """(transformers config, checkpoint key -> HF key) of an HF or mamba_ssm config.json,
    refusing what tdos cannot sweep."""
    if "model_type" in raw:
        return _auto_config(raw, local, where, trust_remote_code), str
    if "d_model" in raw and "n_layer" in raw:        # mamba_ssm format (state-spaces/mamba-*)
        try:
            return mamba_ssm_to_hf_config(raw), _mamba_ssm_key
        except MambaSsmConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        except Exception as e:  # transformers' own check of the config it was handed
            raise ConfigError(f"{where}: {local / 'config.json'}: bad mamba_ssm setting "
                              f"({_first_line(_root_cause(e))}) — fix config.json or re-download") from None
    raise ConfigError(f"{where}: {local / 'config.json'} has neither model_type (transformers) "
                      f"nor d_model/n_layer (mamba_ssm) — point to a causal LM checkpoint")


def _auto_config(raw: dict, local: Path, where: str, trust_remote_code: bool):
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    kind = raw["model_type"]
    if kind not in CONFIG_MAPPING_NAMES and not trust_remote_code:
        why = "its code ships with the checkpoint (auto_map)" if "auto_map" in raw else \
              "transformers does not know it"
        raise ConfigError(f"{where}: model_type {kind!r} is not in transformers "
                          f"{_version()} ({why}) — set model.trust_remote_code: true to run "
                          f"the checkpoint's own code, or upgrade transformers")
    try:
        config = AutoConfig.from_pretrained(str(local), local_files_only=True,
                                            trust_remote_code=trust_remote_code)
    except Exception as e:  # transformers raises many types for inconsistent settings
        raise ConfigError(f"{where}: {local / 'config.json'} is inconsistent: {_first_line(_root_cause(e))} — "
                          f"fix config.json or re-download the checkpoint") from None
    refuse(config, where)
    return config


def refuse(config, where: str) -> None:
    """A ConfigError when tdos cannot sweep the model `config` describes (module doc)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    kind = config.model_type
    if getattr(config, "is_encoder_decoder", False):
        raise ConfigError(f"{where}: {kind} is an encoder–decoder model — tdos sweeps decoder-only "
                          f"causal LMs (its decoder sees the encoder's whole input)")
    if any(getattr(config, name, None) is not None for name in _MODALITIES):
        raise ConfigError(f"{where}: {kind} is a multimodal wrapper around a text decoder — save "
                          f"its text model alone (its text_config, e.g. gemma3 -> gemma3_text) as a "
                          f"checkpoint and sweep that")
    if kind not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and not getattr(config, "auto_map", None):
        raise ConfigError(f"{where}: {kind} is not a causal LM (AutoModelForCausalLM has no class "
                          f"for it; encoder-only models attend both ways) — use a decoder-only model")


def meta_model(config, where: str, trust_remote_code: bool = False, source: str = "config.json"):
    """The model of `config` on the meta device (shapes only, no memory); encoder-only models
    (attention modules with is_causal False) are refused here. `source`: the file the config
    was read from (config.json, or a GGUF's metadata)."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    except Exception as e:  # inconsistent sizes raise many types inside transformers
        raise ConfigError(f"{where}: {source} settings are inconsistent ({type(e).__name__}: "
                          f"{_first_line(e)}) — fix {source} or re-download the checkpoint") from None
    both = next((m for m in decoder_layers(model).modules() if getattr(m, "is_causal", True) is False), None)
    if both is not None:
        raise ConfigError(f"{where}: {config.model_type} attends in both directions ({type(both).__name__}"
                          f" has is_causal False) — J_ts for s > t need not be zero, so its block "
                          f"Jacobian has no per-token spectrum; use a decoder-only model")
    return model


def model_info(config, model, local: Path, weight_bytes: int) -> ModelInfo:
    """ModelInfo of a (meta) model built from `config`."""
    text = config.get_text_config()
    limits = [getattr(text, k, None) for k in ("n_positions", "max_position_embeddings")]
    kinds = layer_kinds(model)
    # Mamba-style models embed no positions; some still carry a nominal max_position_embeddings
    bounded = not all(k.ssm or k.kind == "recurrent" for k in kinds)
    out = model.get_output_embeddings()
    apart = {id(p) for m in (decoder_layers(model), model.get_input_embeddings(), out)
             if m is not None for p in m.parameters()}
    return ModelInfo(config.model_type, text.num_hidden_layers, text.hidden_size,
                     next((v for v in limits if v), None) if bounded else None,
                     text.vocab_size, kinds, local, weight_bytes,
                     max(sum(p.numel() for p in layer.parameters())
                         for layer in decoder_layers(model)),
                     sum(p.numel() for p in model.parameters()),
                     sum(p.numel() for p in model.parameters() if id(p) not in apart))


def rescales_on_first_forward(config) -> bool:
    """Whether an RWKV model's first eval forward divides some layers' weights in place (by 2
    every `rescale_every` layers: only layers at or beyond it change)."""
    c = config.get_text_config()
    every = getattr(c, "rescale_every", 0) or 0
    return every > 0 and c.num_hidden_layers > every


def _mamba_ssm_key(key: str) -> str:
    # the two Mamba layouts differ only in the embedding's name
    return key.replace("backbone.embedding.", "backbone.embeddings.")


class MambaSsmConfigError(ValueError):
    """A mamba_ssm config.json setting tdos cannot map onto transformers' Mamba blocks."""


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


def _version() -> str:
    import transformers

    return transformers.__version__


def _root_cause(e: BaseException) -> BaseException:
    """The innermost cause: transformers wraps a config's own check in a validation error
    whose message only names the validator."""
    while e.__cause__ is not None:
        e = e.__cause__
    return e


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:200] if lines else type(e).__name__
