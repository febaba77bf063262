"""Config + store state -> the tasks still to do, and the token ids every task reads.

Tasks come sequence by sequence with layers ascending, so a worker that already holds the
hidden states entering layer l advances them to the next layer instead of starting over.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import zarr

from sweep.config import ConfigError, InputsConfig, ModelSpec, SweepConfig
from sweep.inputs import random_ids
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
    fingerprint: str  # of the store's config      } the store's identity: every worker
    store_id: str     # its creation_id             } cache is keyed by both
    weights: tuple[tuple[str, str], ...]  # ((file, sha256), ...) recorded at store creation
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
    fp, store_id = root.attrs["fingerprint"], root.attrs["creation_id"]
    for m in cfg.models:
        g = root[m.name]
        weights = tuple(sorted((f, r["sha256"]) for f, r in g.attrs["checkpoint"]["files"].items()))
        ref = ModelRef(store=cfg.store, group=m.name, path=m.path, dtype=m.dtype,
                       revision=m.revision, device=cfg.compute.device, fingerprint=fp,
                       store_id=store_id, weights=weights, cpu_linalg=cfg.compute.cpu_linalg)
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
    """(S, L) int64 token ids of model `m`: fixed when the config was loaded (the text cut
    into consecutive windows by the model's tokenizer, or uniform random ids from
    `inputs.seed`; sweep/inputs.py)."""
    if m.tokens is not None:
        return m.tokens
    if inputs.text:
        raise ConfigError(f"inputs.text: {m.path} was not resolved by load_config — load the "
                          f"config with sweep.config.load_config")
    return random_ids(inputs.seed, inputs.sequences, inputs.length, m.info.vocab_size)
