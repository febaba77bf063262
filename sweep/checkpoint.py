"""What validation needs to know about a checkpoint, from its config.json alone.

Reading only config.json keeps `tdos sweep` fast to refuse a bad config: no weights are
touched until the config has passed every check.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cluster.config import ConfigError

SUPPORTED = ("gpt2", "gpt_neox", "llama", "mamba")
_WEIGHTS = ("*.safetensors", "*.bin")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


@dataclass(frozen=True)
class ModelInfo:
    arch: str                  # gpt2 | gpt_neox | llama | mamba
    n_layers: int
    d_model: int
    max_length: int | None     # context (positions); None for Mamba
    vocab_size: int            # random token ids are drawn from [0, vocab_size)


def read_model_info(path: str, revision: str | None, where: str) -> ModelInfo:
    """config.json of a local dir or a cached hub id -> ModelInfo; ConfigError if unusable."""
    cfg_file = _config_file(path, revision, where)
    try:
        cfg = json.loads(cfg_file.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{where}: cannot read {cfg_file}: {e}; fix or re-download the checkpoint") from None
    if not any(cfg_file.parent.glob(p) for p in _WEIGHTS):
        raise ConfigError(f"{where}: no checkpoint weights (*.safetensors, *.bin) next to {cfg_file}; "
                          f"download the weights or fix the path")
    if "model_type" in cfg:
        return _hf_info(cfg, cfg_file.parent, where)
    if "d_model" in cfg and "n_layer" in cfg:      # mamba_ssm format (state-spaces/mamba-*)
        return ModelInfo("mamba", int(cfg["n_layer"]), int(cfg["d_model"]), None, int(cfg["vocab_size"]))
    raise ConfigError(f"{where}: {cfg_file} has neither model_type (HF) nor d_model/n_layer (mamba_ssm); "
                      f"point to a supported checkpoint ({', '.join(SUPPORTED)})")


def load_tokenizer(path: str, revision: str | None):
    """The checkpoint's own tokenizer from local files, or None when it has none."""
    from transformers import AutoTokenizer

    # transformers builds an empty tokenizer from config.json alone: require its files
    if not any(_local_file(path, revision, name) for name in _TOKENIZER_FILES):
        return None
    try:
        return AutoTokenizer.from_pretrained(str(path), revision=revision, local_files_only=True)
    except Exception:  # missing or unreadable tokenizer files raise many types
        return None


def _local_file(path: str, revision: str | None, name: str) -> bool:
    p = Path(path).expanduser()
    if p.is_dir():
        return (p / name).is_file()
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(path, name, revision=revision), str)


def _config_file(path: str, revision: str | None, where: str) -> Path:
    p = Path(path).expanduser()
    if p.is_dir():
        if (p / "config.json").is_file():
            return p / "config.json"
        raise ConfigError(f"{where}: no checkpoint at {path} (directory has no config.json); "
                          f"give a checkpoint directory or hub id")
    hit = None
    if path.count("/") == 1 and not path.startswith((".", "/", "~")):
        from huggingface_hub import try_to_load_from_cache

        hit = try_to_load_from_cache(path, "config.json", revision=revision)
    if isinstance(hit, str):
        return Path(hit)
    rev = f" at revision {revision}" if revision else ""
    raise ConfigError(f"{where}: no checkpoint at {path}{rev} (not a local directory, not in the "
                      f"Hugging Face cache); download it first or fix the path")


def _hf_info(cfg: dict, local: Path, where: str) -> ModelInfo:
    arch = cfg["model_type"]
    if arch not in SUPPORTED:
        raise ConfigError(f"{where}: architecture {arch!r} (config.json model_type) is not supported; "
                          f"use one of {', '.join(SUPPORTED)}")
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(str(local), local_files_only=True)
    max_len = None if arch == "mamba" else getattr(c, "n_positions", None) or c.max_position_embeddings
    return ModelInfo(arch, c.num_hidden_layers, c.hidden_size, max_len, c.vocab_size)
