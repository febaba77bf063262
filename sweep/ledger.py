"""What is done: the one reading of a store's ledger that every caller uses.

The ledger array (layer row, seq, block) holds 0 (pending), 1 (done) or 2 (done, with a
non-finite value: flagged). "Done" always means a cell that is not pending — flagged blocks
included, since rerunning them would give the same values — and only planned cells count
(a row's blocks beyond its layer_length do not exist). A_log layers are done once written
(Mamba-style layers only). In a group swept with `depth:`, each (sequence, token block)'s walk
up the layers is done once its `depth_ledger` cell is set, which its task does last.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import zarr

from analysis import schema
from analysis.schema import FLAGGED, PENDING


@dataclass(frozen=True)
class Ledger:
    """One model group's completion state."""

    cells: np.ndarray            # (R, S, nb) int8
    planned: np.ndarray          # (R, S, nb) bool: cells inside each row's layer_length
    layers: np.ndarray           # (R,) model layer of each row
    lengths: np.ndarray          # (R,) tokens planned per row
    missing_a_log: tuple[int, ...]   # Mamba-style model layers whose A_log is not written
    residual: np.ndarray         # (R, S) int8: h_l of the row's layer stored (DONE) or not
    walks: np.ndarray | None = None   # (S, nb) int8 depth_ledger; None: swept without depth
    memory: np.ndarray | None = None  # (R, S) int8 memory_ledger; None: no `memory:` yet

    @classmethod
    def read(cls, g: zarr.Group) -> "Ledger":
        cells = g["ledger"][...]
        R, S, nb = cells.shape
        B = g.attrs["inputs"]["token_block"]
        lengths = g["layer_length"][...]
        mask = np.arange(nb)[None, :] < (-(-lengths // B))[:, None]          # (R, nb)
        return cls(cells, np.broadcast_to(mask[:, None, :], (R, S, nb)), g["layer"][...],
                   lengths, tuple(_missing_a_log(g)), g["residual_ledger"][...],
                   g["depth_ledger"][...] if "depth_ledger" in g else None,
                   g["memory_ledger"][...] if "memory_ledger" in g else None)

    def pending(self):
        """(row, seq, block) of every planned cell still at 0, rows in store order."""
        r, s, b = np.nonzero((self.cells == PENDING) & self.planned)
        return list(zip(r.tolist(), s.tolist(), b.tolist()))

    def pending_walks(self):
        """(seq, block) of every walk up the layers not finished (depth only; rows share one
        length there)."""
        if self.walks is None:
            return []
        s, b = np.nonzero((self.walks == PENDING) & self.planned[0])
        return list(zip(s.tolist(), b.tolist()))

    def pending_memory(self):
        """(row, seq) of every lag profile not written (memory only)."""
        if self.memory is None:
            return []
        r, s = np.nonzero(self.memory == PENDING)
        return list(zip(r.tolist(), s.tolist()))

    @property
    def total(self) -> int:
        return int(self.planned.sum())

    @property
    def done(self) -> int:
        return int(((self.cells != PENDING) & self.planned).sum())

    @property
    def flagged(self) -> int:
        return int(((self.cells == FLAGGED) & self.planned).sum())

    def row_counts(self, row: int) -> tuple[int, int, int]:
        """(done, flagged, total) of one row."""
        cells = self.cells[row][self.planned[row]]
        return int((cells != PENDING).sum()), int((cells == FLAGGED).sum()), int(cells.size)


@dataclass(frozen=True)
class LedgerCounts:
    """Blocks of the planned part of the ledgers, and A_log layers still missing."""

    total: int                 # planned blocks
    done: int                  # in the ledger (flagged included)
    flagged: int               # of which non-finite
    missing_a_log: int         # model layers whose A_log is not written (Mamba-style)
    missing_walks: int = 0     # (sequence, token block) walks whose stacks are not written (depth)
    missing_memory: int = 0    # (layer row, sequence) lag profiles not written (memory)

    @property
    def complete(self) -> bool:
        return (self.done == self.total and self.missing_a_log == 0 and self.missing_walks == 0
                and self.missing_memory == 0)


def counts(root: zarr.Group, names) -> LedgerCounts:
    """LedgerCounts summed over the model groups `names`."""
    ledgers = [Ledger.read(root[n]) for n in names]
    return LedgerCounts(sum(x.total for x in ledgers), sum(x.done for x in ledgers),
                        sum(x.flagged for x in ledgers),
                        sum(len(x.missing_a_log) for x in ledgers),
                        sum(len(x.pending_walks()) for x in ledgers),
                        sum(len(x.pending_memory()) for x in ledgers))


def _missing_a_log(g: zarr.Group) -> list[int]:
    """Mamba-style model layers whose A_log is not written yet (all NaN)."""
    if "a_log" not in g:
        return []
    kinds = g.attrs.get("layer_kinds") or []
    a = g["a_log"][...]                                   # (n_layers, channel, state)
    return [i for i, k in enumerate(kinds) if schema.is_ssm(k) and np.isnan(a[i]).all()]


def _groups_with(path: str, array: str):
    """(model name, group, its Ledger) of every group of the store at `path` holding `array`."""
    root = zarr.open_group(str(path), mode="r")
    for name in root.attrs.get("models", []):
        if name in root and array in root[name]:
            yield name, root[name], Ledger.read(root[name])


def walk_rows(path: str) -> list[dict]:
    """Per model swept with `depth:`: its spans, run of layers, and walks done / planned."""
    out = []
    for name, g, led in _groups_with(path, "depth_ledger"):
        total = int(led.planned[0].sum())
        out.append({"model": name, "spans": g.attrs["depth"]["spans"],
                    "layers": g.attrs["depth"]["layers"], "total": total,
                    "done": total - len(led.pending_walks())})
    return out


def memory_rows(path: str) -> list[dict]:
    """Per model swept with `memory:`: its settings and (layer, sequence) profiles done / planned."""
    return [{"model": name, **g.attrs["memory"], "total": led.memory.size,
             "done": led.memory.size - len(led.pending_memory())}
            for name, g, led in _groups_with(path, "memory_ledger")]


def status_rows(path: str) -> list[dict]:
    """Per model and layer: blocks done / flagged / total, tokens planned, sequences whose
    h_l is stored (of how many), dtype, kind."""
    from sweep.store import group_ready

    root = zarr.open_group(str(path), mode="r")
    try:
        schema.check_format(root.attrs, path)
    except schema.StoreError as e:
        from sweep.errors import StoreMismatch

        raise StoreMismatch(f"store: {e}") from None
    rows = []
    for name in root.attrs.get("models", []):
        if not group_ready(root, name):
            rows.append({"model": name, "layer": None, "done": 0, "flagged": 0, "total": None,
                         "tokens": None, "residual": None, "dtype": None, "kind": None})
            continue
        g = root[name]
        led = Ledger.read(g)
        kinds = g.attrs.get("layer_kinds") or []
        for r, (layer, n) in enumerate(zip(led.layers, led.lengths)):
            done, flagged, total = led.row_counts(r)
            stored = int((led.residual[r] != PENDING).sum())
            rows.append({"model": name, "layer": int(layer), "done": done,
                         "flagged": flagged, "total": total, "tokens": int(n),
                         "residual": f"{stored}/{led.residual.shape[1]}",
                         "dtype": g.attrs["model"]["dtype"],
                         "kind": kinds[int(layer)] if kinds else None})
    return rows
