"""Small GGUF files written by the `gguf` package's GGUFWriter from tiny transformers models.

`write_gguf(model, path, qtype)` writes what llama.cpp's converter writes for the model's
family: its tensors under the `gguf` package's own name map (gguf.get_tensor_name_map), in
llama.cpp's layout (LLaMA's q/k rows interleaved per head, Mamba's A stored as -exp(A_log) and
its conv1d squeezed), and the metadata keys transformers' GGUF reader maps onto the config.
Matrices go in `qtype` (F32, F16, BF16, Q8_0, Q4_0, Q4_1: quantized by gguf.quants), 1-D
tensors and rows that are not whole blocks in F32, as llama.cpp keeps them. No tokenizer is
written unless asked.
"""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import torch

ARCH = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2,
        "qwen3": gguf.MODEL_ARCH.QWEN3, "mamba": gguf.MODEL_ARCH.MAMBA}


def _interleave(w: np.ndarray, heads: int) -> np.ndarray:
    """LLaMA's q/k rows in llama.cpp's order: per head, the rotary halves interleaved."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _metadata(w: gguf.GGUFWriter, config) -> None:
    w.add_block_count(config.num_hidden_layers)
    w.add_embedding_length(config.hidden_size)
    w.add_vocab_size(config.vocab_size)
    if config.model_type == "mamba":
        w.add_context_length(1 << 20)
        w.add_ssm_conv_kernel(config.conv_kernel)
        w.add_ssm_inner_size(config.intermediate_size)
        w.add_ssm_state_size(config.state_size)
        w.add_ssm_time_step_rank(config.time_step_rank)
        w.add_layer_norm_rms_eps(config.layer_norm_epsilon)
        return
    w.add_context_length(config.max_position_embeddings)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_rope_freq_base(config.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    if config.model_type == "llama":
        w.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    if config.model_type == "qwen3":
        w.add_key_length(config.head_dim)
        w.add_value_length(config.head_dim)


def _tensors(model) -> dict[str, np.ndarray]:
    """{GGUF name: float32 array in llama.cpp's layout} of `model`'s state dict."""
    c = model.config
    names = gguf.get_tensor_name_map(ARCH[c.model_type], c.num_hidden_layers)
    out = {}
    for key, t in model.state_dict().items():
        if key == "lm_head.weight" and c.tie_word_embeddings:
            continue
        a = t.detach().to(torch.float32).numpy().copy()
        if key.endswith("q_proj.weight") and c.model_type == "llama":
            a = _interleave(a, c.num_attention_heads)
        elif key.endswith("k_proj.weight") and c.model_type == "llama":
            a = _interleave(a, c.num_key_value_heads)
        elif key.endswith("A_log"):
            a = -np.exp(a)
        elif key.endswith("conv1d.weight"):
            a = a[:, 0, :]
        name = names.get_name(key, try_suffixes=(".weight", ".bias"))
        assert name is not None, key
        out[name] = a
    return out


def _quantized(a: np.ndarray, q) -> np.ndarray:
    """`a` in type `q`; zero blocks of the right size for a type gguf cannot quantize (Q8_1)."""
    try:
        return gguf.quants.quantize(a, q)
    except NotImplementedError:
        block, size = gguf.GGML_QUANT_SIZES[q]
        return np.zeros((*a.shape[:-1], a.shape[-1] // block * size), np.uint8)


def write_gguf(model, path: Path, qtype: str = "F32", tokenizer: dict | None = None,
               types: dict[str, str] | None = None) -> Path:
    """`model` (a tiny transformers *ForCausalLM) as GGUF file `path`; matrices in `qtype`,
    or per GGUF name in `types`. `tokenizer`: GGUF tokenizer keys to add (name -> value)."""
    w = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[ARCH[model.config.model_type]])
    _metadata(w, model.config)
    for key, value in (tokenizer or {}).items():
        getattr(w, key)(value)
    for name, a in _tensors(model).items():
        q = gguf.GGMLQuantizationType[(types or {}).get(name, qtype if a.ndim > 1 else "F32")]
        if a.shape[-1] % gguf.GGML_QUANT_SIZES[q][0]:     # rows not whole blocks: kept in F32
            q = gguf.GGMLQuantizationType.F32
        if q == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, a)
        elif q == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, _quantized(a, q), raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)
