"""Config + store state -> the tasks still to do, and the token ids every task reads.

Tasks come sequence by sequence with layers ascending, so a worker that already holds the
hidden states entering layer l advances them to the next layer instead of starting over.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zarr

from sweep.checkpoint import load_tokenizer
from sweep.config import ConfigError, InputsConfig, ModelSpec, SweepConfig
from sweep.store import PENDING, missing_a_log, planned_mask


@dataclass(frozen=True)
class ModelRef:
    """What a worker needs to load (and cache) a model, and where its group lives."""

    store: str
    group: str
    path: str
    dtype: str
    revision: str | None
    device: str
    fingerprint: str  # of the store's config: workers' cached array handles are keyed by it
    cpu_linalg: str = "auto"  # compute.cpu_linalg, resolved by each worker (sweep/linalg.py)


@dataclass(frozen=True)
class BlockTask:
    """Eigenvalues of J_tt for t in [t0, t1) of one (layer, sequence)."""

    model: ModelRef
    layer: int        # model layer index
    row: int          # index along the store's `layer` dimension
    seq: int
    block: int
    t0: int
    t1: int
    n_ctx: int        # tokens the hidden states are computed over (the model's longest row)


@dataclass(frozen=True)
class ALogTask:
    """Write A_log of the given model layers (Mamba intrinsic rates)."""

    model: ModelRef
    layers: tuple[int, ...]


Task = BlockTask | ALogTask


def plan(cfg: SweepConfig, root: zarr.Group) -> list[Task]:
    """Only what the store lacks: ledger cells at 0, A_log layers still NaN."""
    tasks: list[Task] = []
    fp = root.attrs["fingerprint"]
    for m in cfg.models:
        g = root[m.name]
        ref = ModelRef(store=cfg.store, group=m.name, path=m.path, dtype=m.dtype,
                       revision=m.revision, device=cfg.compute.device, fingerprint=fp,
                       cpu_linalg=cfg.compute.cpu_linalg)
        todo = (g["ledger"][...] == PENDING) & planned_mask(g)        # (R, S, nb)
        lengths = g["layer_length"][...]                             # (R,)
        layers = g["layer"][...]                                     # (R,)
        B, n_ctx = cfg.token_block, int(lengths.max())
        missing = missing_a_log(g)
        if missing:
            tasks.append(ALogTask(ref, tuple(missing)))
        for seq in range(todo.shape[1]):
            for row in np.argsort(layers, kind="stable"):
                for block in np.flatnonzero(todo[row, seq]):
                    t0 = int(block) * B
                    tasks.append(BlockTask(ref, int(layers[row]), int(row), seq, int(block),
                                           t0, min(t0 + B, int(lengths[row])), n_ctx))
    return tasks


def make_tokens(m: ModelSpec, inputs: InputsConfig) -> np.ndarray:
    """(S, L) int64 token ids: the text file tokenized with the model's own tokenizer, cut
    into consecutive windows, or uniform random ids in [0, vocab) from `inputs.seed`."""
    S, L = inputs.sequences, inputs.length
    if not inputs.text:
        rng = np.random.default_rng(inputs.seed)
        return rng.integers(0, m.info.vocab_size, size=(S, L), dtype=np.int64)
    tok = load_tokenizer(m.path, m.revision)
    if tok is None:
        raise ConfigError(f"inputs.text: {m.path} has no local tokenizer to read the text with; "
                          f"use random tokens (remove `text`)")
    ids = np.asarray(tok(Path(inputs.text).read_text())["input_ids"], dtype=np.int64)
    if ids.size < S * L:
        raise ConfigError(f"inputs.text: {inputs.text} gives {ids.size} tokens, need {S * L}; "
                          f"use a longer text or fewer tokens")
    return ids[: S * L].reshape(S, L)
