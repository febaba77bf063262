"""The plan's look at a checkpoint: what it is, and whether its weights are whole and match
what it says it is, before any store exists.

`inspect_checkpoint` opens the checkpoint through its reader (sweep/checkpoints/formats.py
`open_checkpoint`: a transformers or mamba_ssm directory, or a GGUF file), builds the model
its config describes on the meta device (sweep/plan/architecture.py) and holds the stored
tensors' names and shapes against it, so a truncated download, a missing shard or an edited
config.json is refused in a second, never by a traceback halfway through a sweep.
"""
from __future__ import annotations

import dataclasses

from sweep.checkpoints.formats import open_checkpoint
from sweep.plan.architecture import ModelInfo, meta_model, model_info, rescales_on_first_forward


def inspect_checkpoint(path: str, revision: str | None, where: str,
                       trust_remote_code: bool = False) -> ModelInfo:
    """ModelInfo of checkpoint `path` (a local directory, a cached hub id or a GGUF file); a
    ConfigError naming the file and the fix when anything is missing, corrupt, inconsistent
    or not a decoder-only causal LM (sweep/plan/architecture.py)."""
    ckpt = open_checkpoint(path, revision, where)
    # what the model is first (a refused architecture needs no weights), then its weights
    config = ckpt.config(where, trust_remote_code)
    model = meta_model(config, where, trust_remote_code, source=ckpt.config_source)
    ckpt.bind(model, where)
    ckpt.check(model, where)
    info = model_info(config, model, ckpt.path, ckpt.weight_bytes)
    why = ("RWKV rescales its layers' weights in place on its first forward (rescale_every "
           "below its depth)") if rescales_on_first_forward(model.config) else ckpt.not_local()
    return dataclasses.replace(info, not_local=why, vocab_size=ckpt.vocab_size(config))
