"""The decoder layers of a transformers causal LM, and what kind each one is.

Works on a real model or one built on the meta device (shapes only), so the plan can name
every layer's kind and its SSM shapes from config.json alone. torch is imported by the
functions, not the module: importing the plan loads no torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sweep.format.schema import SSM_KINDS

if TYPE_CHECKING:
    import torch

ATTENTION_TYPES = {"full_attention", "sliding_attention", "chunked_attention", "hybrid",
                   "hybrid_sliding"}


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The ModuleList of the model's decoder layers: the shallowest one with one entry per
    hidden layer (`model.layers`, `transformer.h`, `model.decoder.layers`, `backbone.layers`)."""
    import torch
    n = model.config.get_text_config().num_hidden_layers
    found = [(name.count("."), name, mod) for name, mod in model.named_modules()
             if isinstance(mod, torch.nn.ModuleList) and len(mod) == n]
    if not found:
        raise ValueError(f"{type(model).__name__}: no list of {n} decoder layers")
    return min(found, key=lambda f: f[:2])[2]


@dataclass(frozen=True)
class LayerKind:
    """What one decoder layer is made of."""

    kind: str                    # "attention", "mamba", "mamba2", "deltanet", "recurrent", "conv",
                                 # "mlp", "mamba2+attention" …, then "+moe" when it routes to experts
    delta_channels: int = 0      # width of Δ_t: d_inner (Mamba-1), heads (Mamba-2, delta rule),
                                 # heads·key channels (Kimi's delta rule); 0 otherwise
    a_log_shape: tuple[int, ...] = ()   # (d_inner, d_state) Mamba-1, (heads,) Mamba-2, delta rule
    conv_width: int = 0          # taps of the layer's causal depthwise convolution (Mamba's
                                 # conv_kernel / d_conv, LFM2's L_cache); 0: none

    @property
    def ssm(self) -> str | None:
        """The part with a learned decay (Δ_t and A_log): "mamba", "mamba2", "deltanet"."""
        return next((k for k in self.kind.split("+") if k in SSM_KINDS), None)


def layer_kinds(model: torch.nn.Module) -> tuple[LayerKind, ...]:
    """One LayerKind per decoder layer."""
    types = getattr(model.config.get_text_config(), "layer_types", None)
    return tuple(_kind(layer, types[i] if types else None)
                 for i, layer in enumerate(decoder_layers(model)))


def _kind(layer: torch.nn.Module, layer_type: str | None) -> LayerKind:
    parts = []
    mixer, gate = ssm_mixer(layer), delta_rule_gate(layer)
    shape: tuple[int, ...] = ()
    channels = 0
    if mixer is not None:
        shape = tuple(mixer.A_log.shape)
        channels = shape[0]
        parts.append("mamba" if len(shape) == 2 else "mamba2")
    elif gate is not None:
        shape, channels = (gate.A_log.numel(),), gate.dt_bias.numel()
        parts.append("deltanet")
    # transformers gives every attention module that owns a KV cache slot a `layer_idx`
    # (a linear-attention layer's delta-rule module is named attention too, but keeps a
    # recurrent state: OLMo-Hybrid, Kimi-Linear)
    attends = layer_type != "linear_attention" and any(
        "attention" in type(m).__name__.lower() and hasattr(m, "layer_idx")
        and not any(x is gate for x in m.modules()) for m in layer.modules() if m is not layer)
    if attends or (layer_type in ATTENTION_TYPES and mixer is None):
        parts.append("attention")
    if not parts:
        parts.append("conv" if layer_type == "conv" else
                     "recurrent" if layer_type == "linear_attention" or _recurrent(layer) else "mlp")
    if any(_is_moe(m) for m in layer.modules()):
        parts.append("moe")
    return LayerKind("+".join(parts), channels, shape, conv_width(layer))


def conv_width(layer: torch.nn.Module) -> int:
    """Taps of the widest causal depthwise Conv1d in `layer` (one filter per channel, as in
    Mamba-1/2, hybrids built on them and LFM2's short convolutions), 0 when it has none: lags
    below it reach token t through the convolution's local window, not the layer's memory."""
    import torch
    return max((int(m.kernel_size[0]) for m in layer.modules()
                if isinstance(m, torch.nn.Conv1d) and m.groups == m.in_channels > 1), default=0)


def _recurrent(layer: torch.nn.Module) -> bool:
    """A time-mixing block with no KV cache (RWKV's time-mix keeps a per-layer state)."""
    return any(hasattr(m, "layer_id") for m in layer.modules())


def _is_moe(m: torch.nn.Module) -> bool:
    name = type(m).__name__.lower()
    return "moe" in name or name.endswith("experts")


def ssm_mixer(layer: torch.nn.Module) -> torch.nn.Module | None:
    """The Mamba-style mixer of `layer`: the module that owns a selective SSM's parameters,
    A_log (A = -exp(A_log)) and the skip D (y = C·s + D x), or None. Gated delta-rule layers
    (OLMo-Hybrid, Kimi-Linear, Qwen3-Next) own an A_log for their decay but no D: no selective
    scan, `delta_rule_gate`. (Not decided by the ops found: a release renaming them must stop
    the sweep through Δ_t, not turn Mamba layers into layers without Δ_t.)"""
    return _owner(layer, ("A_log", "D"))


def delta_rule_gate(layer: torch.nn.Module) -> torch.nn.Module | None:
    """The module that owns a gated delta rule's decay parameters, or None: A_log (one per
    head) and dt_bias (one per head, or per key channel of each head: Kimi-Linear), and no D
    (Mamba's skip). transformers' layer hands its kernel the per-token log decay
    g_t = −exp(A_log)·softplus(a_t + dt_bias) (OLMo-Hybrid, Qwen3-Next, Kimi-Linear): the
    state is multiplied by exp(g_t), as Mamba-2's by exp(−Δ_t·exp(A_log))."""
    if ssm_mixer(layer) is not None:
        return None
    return _owner(layer, ("A_log", "dt_bias"))


def a_log(layer: torch.nn.Module):
    """A_log of a layer with a decay, as the store holds it: (d_inner, d_state) Mamba-1, (heads,)
    Mamba-2 and the delta rule (Kimi-Linear keeps it as (1, 1, heads, 1)); None elsewhere."""
    mixer = ssm_mixer(layer)
    if mixer is not None:
        return mixer.A_log.detach()
    gate = delta_rule_gate(layer)
    return None if gate is None else gate.A_log.detach().reshape(-1)


def _owner(layer: torch.nn.Module, names: tuple[str, ...]) -> torch.nn.Module | None:
    import torch
    for m in layer.modules():
        if all(isinstance(getattr(m, p, None), torch.nn.Parameter) for p in names):
            return m
    return None
