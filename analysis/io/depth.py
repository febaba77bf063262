"""The depth section of a model group swept with `depth:` (docs/depth.md): the stacks
P_t(l, s) = J^(l+s−1)_tt ⋯ J^(l)_tt and the finite-depth Lyapunov exponents of the run.
Rows of tokens not walked yet read as NaN."""
from __future__ import annotations

from functools import cached_property

import numpy as np

from sweep.format.ledger import is_done
from sweep.format.schema import StoreError


class DepthReader:
    """`Store`'s stacked-block methods (analysis/io/store.py)."""

    @cached_property
    def depth(self) -> dict | None:
        """{"spans": [s, ...], "layers": [l0, l1]} of a group swept with `depth:`, else None."""
        d = self.group.attrs.get("depth")
        return dict(d) if d else None

    @property
    def depth_spans(self) -> list[int]:
        """The stack lengths s swept ([] without `depth:`)."""
        return list(self._need_depth()["spans"]) if self.depth else []

    @property
    def lyapunov_layers(self) -> tuple[int, int]:
        """(l0, l1): the run of layers the Lyapunov exponents are taken over (S = l1 − l0 + 1)."""
        l0, l1 = self._need_depth()["layers"]
        return int(l0), int(l1)

    def _walks_done(self, seq) -> np.ndarray:
        """(L,) bool: tokens whose walk up the layers is written."""
        n, B = min(self.layer_length.values()), self.token_block
        return np.repeat(is_done(self.group["depth_ledger"][seq]), B)[:n]

    def stack_eigenvalues(self, layer, span, seq=0) -> np.ndarray:
        """(L, d) complex: row t = eig(P_t(layer, span)), P_t = J^(layer+span−1)_tt ⋯ J^(layer)_tt;
        NaN rows for tokens not walked yet."""
        return self._stack("stack_eigenvalues", layer, span, seq)

    def stack_gain(self, layer, span, seq=0) -> np.ndarray:
        """(L,) float64 ‖P_t(layer, span)‖_F² / d: the mean squared gain of a random unit
        perturbation of h_{layer,t} after `span` blocks; NaN as in `stack_eigenvalues`."""
        return self._stack("stack_gain", layer, span, seq).astype(np.float64)

    def stack_lyapunov(self, layer, span, seq=0) -> np.ndarray:
        """(L, d) float64 (1/span) ln σ_i(P_t(layer, span)), largest first; NaN as in
        `stack_eigenvalues`."""
        return self._stack("stack_lyapunov", layer, span, seq).astype(np.float64)

    def stack_shift_direction(self, layer, span, seq=0) -> tuple[np.ndarray, np.ndarray]:
        """ρ (L,), r (L,) float64: P_t(layer, span)'s Rayleigh quotient and relative residual
        along 𝟙/√d; NaN as in `stack_eigenvalues`."""
        return tuple(self._stack(n, layer, span, seq).astype(np.float64)
                     for n in ("stack_shift_rayleigh", "stack_shift_residual"))

    def lyapunov(self, seq=0) -> np.ndarray:
        """(L, d) float64 finite-depth Lyapunov exponents γ_i = (1/S) ln σ_i(P_t(l0, S)) of each
        token over `lyapunov_layers` (S layers), largest first; NaN rows for tokens not walked
        yet."""
        return self._run_exponents("lyapunov", seq)

    def lyapunov_qr(self, seq=0) -> np.ndarray:
        """(L, d) float64 Benettin's QR exponents over the run from the identity frame, largest
        first: a diagnostic that depends on the basis at finite depth, not the exponents."""
        return self._run_exponents("lyapunov_qr", seq)

    def _run_exponents(self, name, seq):
        self._need_depth()
        n = min(self.layer_length.values())
        g = np.array(self.group[name][seq, :n], np.float64)
        g[~self._walks_done(seq)] = np.nan
        return g

    def _stack(self, name, layer, span, seq):
        spans = self.depth_spans
        l0, l1 = self.lyapunov_layers
        if int(span) not in spans:
            raise StoreError(f"span {span} not swept in model {self.name!r} (depth.spans: {spans})")
        if not l0 <= int(layer) <= l1 - int(span) + 1:
            raise StoreError(f"no stack of {span} blocks starts at layer {layer} in model "
                             f"{self.name!r}: starts run {l0}..{l1 - int(span) + 1}")
        n = min(self.layer_length.values())
        a = np.array(self.group[name][spans.index(int(span)), self.row(layer), seq, :n])
        a[~self._walks_done(seq)] = np.nan
        return a

    def _need_depth(self) -> dict:
        if not self.depth:
            raise StoreError(f"model {self.name!r} was swept without `depth:` — add "
                             f"`depth: {{spans: [2, 4]}}` to the config and sweep into a new store")
        return self.depth
