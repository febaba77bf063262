"""The ledger section of a model group: which blocks are written, and which are read as values
(sweep/format/ledger.py says what each code means)."""
from __future__ import annotations

from functools import cached_property

import numpy as np

from sweep.format.ledger import Ledger, is_usable


class LedgerReader:
    """`Store`'s ledger methods (analysis/io/store.py)."""

    def ledger(self) -> np.ndarray:
        """(rows, seq, block) int8 ledger, -1 beyond each row's planned length (sweep.format.ledger);
        rows in the store's order (`row_layers`)."""
        return Ledger.read(self.group).unplanned_marked

    def usable_blocks(self) -> list[tuple[int, int, int]]:
        """(layer, seq, block) of every block read as values: DONE, all finite (not flagged)."""
        i, s, b = np.nonzero(is_usable(self.ledger()))
        return [(self.row_layers[r], int(q), int(c)) for r, q, c in zip(i, s, b)]

    def block_counts(self) -> dict:
        """Planned blocks, done (flagged included, as everywhere), of which flagged, pending."""
        led = Ledger.read(self.group)
        return {"planned": led.total, "done": led.done, "flagged": led.flagged,
                "pending": led.total - led.done}

    @cached_property
    def _usable(self) -> np.ndarray:
        """(rows, seq, block) bool, read once: a block done after this Store was opened stays
        pending here (its rows read NaN), never the other way round, since a block's values
        are written before its ledger cell."""
        return is_usable(self.group["ledger"][...])

    def _row_mask(self, layer, seq) -> np.ndarray:
        """(L_layer,) bool: token rows that belong to a usable block (done, not flagged)."""
        n, B = self.layer_length[layer], self.token_block
        return np.repeat(self._usable[self.row(layer), seq], B)[:n]   # the tail past n is unplanned
