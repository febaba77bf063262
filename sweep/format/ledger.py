"""What is done: the ledger codes, their one meaning, and the one reading of a store's ledger
that every caller uses (the sweep's task list, its workers and `tdos status`, the analysis
reader, the aggregate, the live view). Every cell test goes through the predicates below.

The ledger array (layer row, seq, block) holds 0 (pending), 1 (done) or 2 (done, with a
non-finite value: flagged); the residual, depth and memory ledgers hold 0 or 1. "Done" always
means a written cell, DONE or FLAGGED (`is_done`) — flagged blocks included, since rerunning
them would give the same values — and only planned cells count (a row's blocks beyond its
layer_length do not exist). A_log layers are done once written (Mamba-style layers only). In a group swept with `depth:`, each (sequence, token block)'s walk
up the layers is done once its `depth_ledger` cell is set, which its task does last.

"Usable" is narrower (`is_usable`): a block is read as values only when DONE (all finite); a
flagged block reads as NaN rows.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import zarr

from sweep.format import schema

# ledger codes, int8: the single record of completion
PENDING, DONE, FLAGGED = 0, 1, 2  # FLAGGED: done, but some value is non-finite
LEDGER_CODES = {PENDING: "pending", DONE: "done", FLAGGED: "flagged"}


def code_for(finite: bool) -> int:
    """The code a writer sets once a block's chunks are written: DONE, or FLAGGED when some
    value is non-finite."""
    return DONE if finite else FLAGGED


def is_pending(cells):
    """Cells (a code or an array of them) not written yet: their task still has to run."""
    return np.asarray(cells) == PENDING


def is_done(cells):
    """Cells written, flagged ones included: "done", the one meaning (a cell marked -1,
    beyond its row's planned length, is not done)."""
    return np.isin(cells, (DONE, FLAGGED))


def is_flagged(cells):
    """Cells done with some non-finite value."""
    return np.asarray(cells) == FLAGGED


def is_usable(cells):
    """Cells whose values are read: done and all finite (DONE only)."""
    return np.asarray(cells) == DONE


@dataclass(frozen=True)
class Ledger:
    """One model group's completion state."""

    cells: np.ndarray            # (R, S, nb) int8
    planned: np.ndarray          # (R, S, nb) bool: cells inside each row's layer_length
    layers: np.ndarray           # (R,) model layer of each row
    lengths: np.ndarray          # (R,) tokens planned per row
    residual: np.ndarray         # (R, S) int8: h_l of the row's layer stored (DONE) or not
    walks: np.ndarray | None = None   # (S, nb) int8 depth_ledger; None: swept without depth
    memory: np.ndarray | None = None  # (R, S) int8 memory_ledger; None: no `memory:` yet
    group: zarr.Group | None = field(default=None, repr=False, compare=False)

    @classmethod
    def read(cls, g: zarr.Group) -> "Ledger":
        cells = g["ledger"][...]
        R, S, nb = cells.shape
        B = g.attrs["inputs"]["token_block"]
        lengths = g["layer_length"][...]
        mask = np.arange(nb)[None, :] < (-(-lengths // B))[:, None]          # (R, nb)
        return cls(cells, np.broadcast_to(mask[:, None, :], (R, S, nb)), g["layer"][...],
                   lengths, g["residual_ledger"][...],
                   g["depth_ledger"][...] if "depth_ledger" in g else None,
                   g["memory_ledger"][...] if "memory_ledger" in g else None, g)

    def within(self, layers, sequences: int) -> "Ledger":
        """This ledger as a config that sweeps only model layers `layers` and the first
        `sequences` sequences sees it: a store grown by a larger config holds more, and a
        smaller config hides the rest (never deletes it). Cells outside read as not planned,
        walks and lag profiles outside as written."""
        rows = np.isin(self.layers, list(layers))                  # (R,)
        seqs = np.arange(self.cells.shape[1]) < sequences           # (S,)
        shown = rows[:, None] & seqs[None, :]                       # (R, S)
        if shown.all():
            return self
        walks = None if self.walks is None else np.where(seqs[:, None], self.walks, DONE)
        memory = None if self.memory is None else np.where(shown, self.memory, DONE)
        return replace(self, planned=self.planned & shown[:, :, None], walks=walks, memory=memory)

    @cached_property
    def missing_a_log(self) -> tuple[int, ...]:
        """Mamba-style model layers whose A_log is not written (read on first use: A_log is the
        one array here as large as a layer's parameters)."""
        return tuple(_missing_a_log(self.group))

    def pending(self):
        """(row, seq, block) of every planned cell still at 0, rows in store order."""
        r, s, b = np.nonzero(is_pending(self.cells) & self.planned)
        return list(zip(r.tolist(), s.tolist(), b.tolist()))

    def pending_walks(self):
        """(seq, block) of every walk up the layers not finished (depth only; rows share one
        length there)."""
        if self.walks is None:
            return []
        s, b = np.nonzero(is_pending(self.walks) & self.planned.any(axis=0))
        return list(zip(s.tolist(), b.tolist()))

    def pending_memory(self):
        """(row, seq) of every lag profile not written (memory only)."""
        if self.memory is None:
            return []
        r, s = np.nonzero(is_pending(self.memory))
        return list(zip(r.tolist(), s.tolist()))

    @property
    def total(self) -> int:
        return int(self.planned.sum())

    @property
    def done(self) -> int:
        return int((is_done(self.cells) & self.planned).sum())

    @property
    def flagged(self) -> int:
        return int((is_flagged(self.cells) & self.planned).sum())

    def row_counts(self, row: int) -> tuple[int, int, int]:
        """(done, flagged, total) of one row."""
        cells = self.cells[row][self.planned[row]]
        return int(is_done(cells).sum()), int(is_flagged(cells).sum()), int(cells.size)

    @property
    def unplanned_marked(self) -> np.ndarray:
        """(R, S, nb) int8: the cells, -1 beyond each row's planned length."""
        return np.where(self.planned, self.cells, np.int8(-1)).astype(np.int8)


def _missing_a_log(g: zarr.Group) -> list[int]:
    """Mamba-style model layers whose A_log is not written yet (all NaN)."""
    if "a_log" not in g:
        return []
    kinds = g.attrs.get("layer_kinds") or []
    a = g["a_log"][...]                                   # (n_layers, channel, state)
    return [i for i, k in enumerate(kinds) if schema.is_ssm(k) and np.isnan(a[i]).all()]
