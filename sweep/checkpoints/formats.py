"""`open_checkpoint`: the reader of a checkpoint path, picked once, by what the path is: a
`.gguf` file (gguf_file.py), or a directory (or cached hub snapshot) whose config.json is
transformers' (directory.py: `model_type`) or mamba_ssm's (mamba_ssm.py: `d_model`, `n_layer`).
Nothing outside sweep/checkpoints/ asks which format a checkpoint is."""
from __future__ import annotations

import json
from pathlib import Path

from sweep.checkpoints import directory, gguf_file, mamba_ssm
from sweep.checkpoints.reader import Checkpoint
from sweep.errors import ConfigError, first_line


def open_checkpoint(path, revision: str | None = None, where: str = "model.path",
                    download: bool = False) -> Checkpoint:
    """The reader of checkpoint `path`, picked once: a `.gguf` file, a directory (or cached hub
    snapshot) whose config.json is transformers' (model_type) or mamba_ssm's (d_model,
    n_layer); a ConfigError naming `where` and the fix otherwise."""
    if gguf_file.claims(path):
        if revision:
            raise ConfigError(f"{where.rsplit('.', 1)[0]}.revision: {path} is a local GGUF file, "
                              f"which has no revisions — remove revision")
        return gguf_file.GgufCheckpoint(gguf_file.locate(path, where), str(path))
    local = directory.locate(path, revision, where, download)
    raw = _read_config(local / "config.json", where)
    for cls in (directory.HfDirectory, mamba_ssm.MambaSsmDirectory):
        if cls.claims(raw):
            return cls(local, str(path), raw)
    raise ConfigError(f"{where}: {local / 'config.json'} has neither model_type (transformers) "
                      f"nor d_model/n_layer (mamba_ssm) — point to a causal LM checkpoint")


def _read_config(cfg_file: Path, where: str) -> dict:
    try:
        raw = json.loads(cfg_file.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{where}: cannot read {cfg_file}: {first_line(e)} — fix or "
                          f"re-download the checkpoint") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: {cfg_file} holds {type(raw).__name__}, not a JSON object — "
                          f"fix or re-download the checkpoint")
    return raw
