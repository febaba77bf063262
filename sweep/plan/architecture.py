"""What a checkpoint describes, as the plan needs it: its shape (layers, width, the kind of
every layer, parameter counts) from the model its config describes built on the meta device,
without any weights (the config itself, and the refusal of what tdos cannot sweep, come from
its reader: sweep/checkpoints/). Encoder-only (bidirectional) models are refused here, in one
line, once the model is built.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sweep.errors import ConfigError, first_line
from sweep.plan.layers import LayerKind, decoder_layers, layer_kinds

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
                          f"{first_line(e)}) — fix {source} or re-download the checkpoint") from None
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
