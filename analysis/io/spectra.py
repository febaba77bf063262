"""The spectra section of a model group: token ids, the eigenvalues of J_tt, the norm
directions, ‖J_tt‖_F² and its departure from normality, and which code computed each block.
Rows of blocks that are pending or flagged read as NaN, so row t is always token t."""
from __future__ import annotations

from functools import cached_property

import numpy as np

from sweep.format import schema
from sweep.format.schema import SCALE_ARRAYS, SHIFT_ARRAYS


class SpectraReader:
    """`Store`'s per-token spectral methods (analysis/io/store.py)."""

    def tokens(self, seq=0) -> np.ndarray:
        return np.asarray(self.group["tokens"][seq])              # (L_max,) int64

    def eigenvalues(self, layer, seq=0) -> np.ndarray:
        """(L_layer, d) complex; rows of pending or flagged blocks are NaN."""
        n = self.layer_length[layer]
        ev = np.array(self.group["eigenvalues"][self.row(layer), seq, :n])
        ev[~self._row_mask(layer, seq)] = np.nan
        return ev

    def scale_direction(self, layer, seq=0) -> tuple[np.ndarray, np.ndarray]:
        """ρ (L_layer,), r (L_layer,) float64 of J_tt along h_t; NaN rows as in `eigenvalues`
        and where not computed (a store upgraded from format 1): the classification then
        uses values only."""
        return self._direction(layer, seq, SCALE_ARRAYS)

    def shift_direction(self, layer, seq=0) -> tuple[np.ndarray, np.ndarray]:
        """ρ (L_layer,), r (L_layer,) float64 of J_tt along 𝟙/√d; as `scale_direction`."""
        return self._direction(layer, seq, SHIFT_ARRAYS)

    def norm_directions(self, layer, seq=0) -> tuple[np.ndarray, np.ndarray]:
        """ρ (L_layer, 2), r (L_layer, 2): column 0 along h_t (scale), 1 along 𝟙/√d (shift);
        what `analysis.spectrum.rates.mode_masks` takes to find the scale class."""
        (a, b), (c, e) = self.scale_direction(layer, seq), self.shift_direction(layer, seq)
        return np.stack([a, c], 1), np.stack([b, e], 1)

    def _direction(self, layer, seq, names):
        return tuple(self._per_token(layer, seq, name) for name in names)

    def frobenius2(self, layer, seq=0) -> np.ndarray:
        """(L_layer,) float64 ‖J_tt‖_F²; NaN rows as in `eigenvalues`."""
        return self._per_token(layer, seq, "frobenius2")

    def nonnormality(self, layer, seq=0) -> np.ndarray:
        """(L_layer,) float64 Henrici's relative departure of J_tt from normality,
        sqrt(max(0, ‖J‖_F² − Σ|ζ_i|²)) / ‖J‖_F: 0 for a normal J_tt, up to 1; NaN rows as
        in `eigenvalues`."""
        return self._per_token(layer, seq, "nonnormality")

    @cached_property
    def _per_token_memo(self) -> dict:
        return {}

    def _per_token(self, layer, seq, name) -> np.ndarray:
        """A (L_layer,) row, read once per Store (the analysis asks for each several times;
        they are small) against the ledger as this Store first read it (`_usable`)."""
        memo = self._per_token_memo
        if (layer, seq, name) not in memo:
            n = self.layer_length[layer]
            a = np.array(self.group[name][self.row(layer), seq, :n], np.float64)
            a[~self._row_mask(layer, seq)] = np.nan
            memo[layer, seq, name] = a
        return memo[layer, seq, name].copy()

    def eig_backend(self, layer) -> np.ndarray:
        """(seq, block) str: the eigensolver that computed each block (schema.EIG_BACKENDS;
        "unknown" for blocks not written, or written before format 2)."""
        codes = np.asarray(self.group["eig_backend"][self.row(layer)])
        return np.asarray(schema.EIG_BACKENDS, dtype=object)[codes]

    def jacobian_path(self, layer) -> np.ndarray:
        """(seq, block) str: which code computed each block's J_tt (schema.JACOBIAN_PATHS:
        "hand-written", "generic"; "unknown" for blocks not written, or before format 3)."""
        if "jacobian_path" not in self.group:
            return np.full(self.group["ledger"].shape[1:], "unknown", dtype=object)
        codes = np.asarray(self.group["jacobian_path"][self.row(layer)])
        return np.asarray(schema.JACOBIAN_PATHS, dtype=object)[codes]
