"""The token-memory section of a model group swept with `memory:` (docs/memory.md): the lag
profiles m_t(k) = ‖J_{t,t−k}‖_F² and their standard errors."""
from __future__ import annotations

from functools import cached_property

import numpy as np

from sweep.format.ledger import is_done
from sweep.format.schema import StoreError


class MemoryReader:
    """`Store`'s token-memory methods (analysis/io/store.py)."""

    @cached_property
    def memory_meta(self) -> dict:
        """{lags, probes, every, estimator} of the group's token memory (StoreError: none)."""
        meta = self.group.attrs.get("memory")
        if not meta:
            raise StoreError(f"model {self.name!r} holds no token memory — add `memory: {{lags: 64, "
                             f"probes: 8, every: 8}}` to the config and run the sweep again "
                             f"(--resume computes only the memory)")
        return dict(meta)

    def conv_width(self, layer) -> int | None:
        """Taps of model layer `layer`'s causal depthwise convolution (Mamba's conv_kernel,
        LFM2's L_cache), 0 when it has none, None when the store predates its recording (a
        `tdos sweep --resume` records it)."""
        widths = self.group.attrs.get("conv_widths")
        return None if widths is None else int(widths[int(layer)])

    def memory(self, layer, seq=0) -> np.ndarray:
        """(L_layer, lags+1) float64 m_t(k) = ‖J_{t,t−k}‖_F²; NaN where t − k < 0, at tokens
        not sampled, and for profiles not written yet."""
        return self._memory("memory", layer, seq)

    def memory_stderr(self, layer, seq=0) -> np.ndarray:
        """(L_layer, lags+1) float64: the standard error of `memory` (0 when exact)."""
        return self._memory("memory_stderr", layer, seq)

    def _memory(self, name, layer, seq):
        self.memory_meta
        n = self.layer_length[layer]
        a = np.array(self.group[name][self.row(layer), seq, :n], np.float64)
        if not is_done(self.group["memory_ledger"][self.row(layer), seq]):
            a[:] = np.nan
        return a
