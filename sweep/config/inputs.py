"""The `inputs:` section: its allowed values and the checks between its fields, before anything
is read (the plan reads the texts and datasets; sweep/plan/inputs.py, windows.py)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from sweep.config.validate import is_dir
from sweep.errors import ConfigError

SEED_MAX = 2**63 - 1              # numpy takes any seed >= 0; zarr attrs hold int64
BOS_RULES = ("auto", "always", "never")
WINDOWS = ("document", "packed")
OFFSETS = ("start", "random")
_DATASET_ONLY = ("dataset_config", "split", "column", "min_chars", "offset")
MAX_TOKENS = 10**8      # sequences * length: far past any sweep (~1e4 core-years of eig at d = 1024)


def check_inputs(inputs) -> None:
    """What lies between the fields of an InputsConfig (each field's own check, declared in
    sweep/config/sections.py, ran when it was built): the size, the text/dataset fields."""
    if inputs.sequences * inputs.length > MAX_TOKENS:
        raise ConfigError(f"inputs: sequences*length = {inputs.sequences * inputs.length} tokens, more "
                          f"than a sweep can compute ({MAX_TOKENS:.0e}) — use fewer or shorter sequences")
    if inputs.tokenizer is not None and not (inputs.text or inputs.dataset):
        raise ConfigError("inputs.tokenizer: only used to read inputs.text or inputs.dataset — add "
                          "`text:` (e.g. stdlib:pydoc_data.topics) or `dataset:`, or remove `tokenizer`")
    _check_dataset_fields(inputs)


def resolve_paths(inputs, base_dir):
    """A tokenizer directory becomes absolute, a hub id stays as written; the text and the
    dataset stay as written (messages quote them so) and resolve from `base_dir`, the config
    file's directory, when the plan reads them."""
    tok = inputs.tokenizer
    if tok is not None and is_dir(Path(base_dir, tok).expanduser()):
        tok = str(Path(base_dir, tok).expanduser().resolve())
    return dataclasses.replace(inputs, tokenizer=tok, base_dir=str(Path(base_dir).resolve()))


def text_identity(spec: str, base_dir: str) -> str:
    """The text as the fingerprint names it: an absolute file, directory or glob."""
    if spec.startswith("stdlib:"):
        return spec
    p = Path(base_dir, spec).expanduser()
    try:
        return str(p.resolve()) if p.exists() else str(p)
    except (OSError, ValueError):
        return spec


def _check_dataset_fields(inputs) -> None:
    """The dataset, window and BOS fields of `inputs` (an InputsConfig) together, before
    anything is read."""
    if inputs.text and inputs.dataset:
        raise ConfigError("inputs.dataset: give either `text` or `dataset`, not both — remove one of them")
    if not inputs.dataset:
        for name in _DATASET_ONLY:
            if getattr(inputs, name) is not None:
                raise ConfigError(f"inputs.{name}: only used with inputs.dataset — add `dataset:` "
                                  f"or remove `{name}`")
        if inputs.windows == "document":
            raise ConfigError("inputs.windows: document windows need inputs.dataset (inputs.text is "
                              "one joined text, cut packed) — use windows: packed, or give `dataset:`")
    if not (inputs.text or inputs.dataset):
        for name in ("windows", "bos"):
            if getattr(inputs, name) is not None:
                raise ConfigError(f"inputs.{name}: random token ids have no documents or BOS — add "
                                  f"`dataset:` or `text:`, or remove `{name}`")
    if inputs.offset == "random" and inputs.windows == "packed":
        raise ConfigError("inputs.offset: only document windows start at an offset — use "
                          "windows: document, or remove `offset`")
