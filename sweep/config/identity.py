"""What of a config decides the store's contents: `identity_dict` (JSON-able) and its sha256,
`fingerprint`, which a store records and every later run of it must match."""
from __future__ import annotations

import dataclasses
import hashlib
import json

from sweep.config.inputs import text_identity
from sweep.config.sections import DATASET_FIELDS, InputsConfig, SweepConfig
from sweep.format.fields import yaml_names

__all__ = ["identity_dict", "fingerprint"]


def identity_dict(cfg: SweepConfig) -> dict:
    """The parts of the config that decide what is in the store (JSON-able)."""
    models = [{"path": m.path, "dtype": m.dtype, "revision": m.revision, "name": m.name,
               "layers": _jsonable_layers(m.layers)} for m in cfg.models]
    inputs = {k: getattr(cfg.inputs, k) for k in yaml_names(InputsConfig)}
    if inputs["text"]:
        inputs["text"] = text_identity(inputs["text"], cfg.inputs.base_dir)
    for name in ("tokenizer", *DATASET_FIELDS):   # absent when unset: older stores keep their fingerprint
        if inputs[name] is None:
            del inputs[name]
    for m, spec in zip(models, cfg.models):
        if spec.trust_remote_code:        # absent when false: fingerprints of older stores hold
            m["trust_remote_code"] = True
        if spec.nulls is not None:        # absent without nulls: fingerprints of older stores hold
            m["nulls"] = spec.nulls.record()
        if spec.quantization is not None:   # absent without an ensemble: older fingerprints hold
            m["quantization"] = dataclasses.asdict(spec.quantization)
    ident = {"models": models, "inputs": inputs,
             "layers": _jsonable_layers(cfg.layers), "token_block": cfg.token_block}
    if cfg.compute.engine != "auto":      # the fast paths and the generic path differ in rounding
        ident["engine"] = cfg.compute.engine
    if cfg.depth is not None:             # absent without depth: older fingerprints hold
        ident["depth"] = {"spans": list(cfg.depth.spans)}
    return ident


def fingerprint(cfg: SweepConfig) -> str:
    """sha256 of the canonical JSON of identity_dict: models + inputs + layers + token_block
    (+ engine when not auto, + depth.spans when given)."""
    canon = json.dumps(identity_dict(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()


def _jsonable_layers(layers):
    if isinstance(layers, dict):
        return {str(k): v for k, v in layers.items()}
    return layers
