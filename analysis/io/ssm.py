"""The learned-decay section of a model group (Mamba-style layers, the gated delta rule):
A_log per model layer, the selective step Δ_t per token, and the rates they make."""
from __future__ import annotations

import numpy as np

from sweep.format import schema


class SSMReader:
    """`Store`'s methods for layers with a learned decay (analysis/io/store.py)."""

    @property
    def is_mamba(self) -> bool:
        """Whether any layer has a learned decay (Δ_t and A_log: Mamba-style, gated delta
        rule): `ssm_layers` says which."""
        return "delta" in self.group and "a_log" in self.group

    @property
    def ssm_layers(self) -> list[int]:
        """Model layers with Δ_t and A_log (Mamba-1, Mamba-2, gated delta rule), swept or not."""
        return [i for i, k in enumerate(self.layer_kinds) if schema.is_ssm(k)]

    def _a_log_shape(self, layer) -> tuple[int, ...]:
        shapes = self.group.attrs.get("a_log_shapes")
        if shapes:
            return tuple(shapes[int(layer)] or ())
        return tuple(self.group["a_log"].shape[1:])

    def delta_channels(self, layer) -> int:
        """Width of Δ_t at model layer `layer`: d_inner (Mamba-1), heads (Mamba-2, gated delta
        rule), heads·key channels (Kimi-Linear's per-channel gate)."""
        widths = self.group.attrs.get("delta_channels")
        return int(widths[int(layer)]) if widths else self._need_ssm(layer, "Δ_t")[0]

    def delta(self, layer, seq=0) -> np.ndarray:
        """(L_layer, delta_channels(layer)) selective step Δ_t: per channel (Mamba-1), per head
        (Mamba-2: softplus(dt + dt_bias); gated delta rule: −g_t / exp(A_log) of the log decay
        g_t its kernel receives, softplus(a_t + dt_bias) where g_t = −exp(A_log)·softplus(a_t
        + dt_bias)), per key channel of each head (Kimi-Linear); NaN rows as in `eigenvalues`."""
        self._need_ssm(layer, "delta")
        n = self.layer_length[layer]
        de = np.array(self.group["delta"][self.row(layer), seq, :n, : self.delta_channels(layer)])
        de[~self._row_mask(layer, seq)] = np.nan
        return de

    def a_log(self, layer) -> np.ndarray:
        """A_log of model layer `layer` (swept or not): (d_inner, d_state) Mamba-1, (heads,)
        Mamba-2 and the gated delta rule (one A per head)."""
        shape = self._need_ssm(layer, "a_log")
        a = np.asarray(self.group["a_log"][int(layer)])                 # (channel, state)
        return a[: shape[0], : shape[1]] if len(shape) == 2 else a[: shape[0], 0]

    def intrinsic_rates(self, layer) -> np.ndarray:
        """λ_A = exp(A_log), float64: d_inner·d_state modes (Mamba-1), one per head (Mamba-2,
        gated delta rule)."""
        return np.exp(self.a_log(layer).astype(np.float64)).ravel()

    def effective_rates(self, layer, seq=0) -> np.ndarray:
        """λ_eff = Δ_t·exp(A_log), float64, the rate at which the layer's state decays at token
        t: (L_layer, d_inner, d_state) Mamba-1, (L_layer, delta_channels) otherwise (for a gated
        delta rule, −g_t: the log decay transformers hands its kernel)."""
        lam = np.exp(self.a_log(layer).astype(np.float64))
        return effective(self.delta(layer, seq).astype(np.float64), lam)

    def _need_ssm(self, layer, what) -> tuple[int, ...]:
        if not self.is_mamba or not schema.is_ssm(self.layer_kind(layer)):
            kind = self.layer_kinds[int(layer)] if int(layer) < len(self.layer_kinds) else "?"
            raise schema.StoreError(f"model {self.name!r} layer {layer} ({kind}) has no {what}: only "
                                    f"layers with a learned decay ({', '.join(schema.SSM_KINDS)}; "
                                    f"here layers {self.ssm_layers}) do")
        return self._a_log_shape(layer)


def effective(delta: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """Δ_t·λ_A: delta (..., c), lam (c, N) Mamba-1 -> (..., c, N); lam (H,) one rate per head,
    H dividing c (c = H, or c = H·K key channels stored head-major) -> (..., c)."""
    if lam.ndim == 2:
        return delta[..., None] * lam
    return delta * np.repeat(lam, delta.shape[-1] // lam.shape[0])
