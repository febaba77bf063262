"""How far the quantization could move a declared observable: the members' spread as an upper
confidence bound, set against the declared test's Δ (docs/analysis.md, "The quantization's
spread against Δ").

A handful of ensemble members estimate their standard deviation poorly: with n members the
sample sd has n − 1 degrees of freedom, and (n − 1) s²/σ² is χ²(n − 1). The bound printed is
the upper end of the two-sided interval for σ at the level,

    σ_upper = s · √((n − 1) / χ²_{(1 − level)/2}(n − 1)),

(3 members with s = 0.016 at 90 %: 0.071, 4.4 s; 8 members: 1.8 s), and "the spread against Δ"
is σ_upper / |Δ|, never s / |Δ|. The members are read on the tokens the trained model and the
kind's nulls share, the same tokens as the test's Δ, where they have them (`sequences` says how
many they rest on).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from analysis.fit.enough import Enough, enough


def sd_upper(sd, n, level) -> float:
    """The upper end of the two-sided `level` interval for σ from a sample sd of n values."""
    if n < 2 or not np.isfinite(sd):
        return np.nan
    return float(sd * np.sqrt((n - 1) / stats.chi2.ppf((1 - level) / 2, n - 1)))


@dataclass(frozen=True)
class QuantSpread:
    """One declared observable over the trained model's quantization ensemble."""
    members: dict              # {member name: value}
    sequences: int             # the sequences the values rest on
    level: float
    delta: float               # the declared test's Δ it is set against
    check: Enough

    @property
    def sd(self) -> float:
        v = np.array(list(self.members.values()), np.float64)
        return float(v.std(ddof=1)) if len(v) > 1 else np.nan

    @property
    def sd_upper(self) -> float:
        return sd_upper(self.sd, len(self.members), self.level)

    @property
    def of_delta(self) -> float:
        """σ_upper / |Δ|: how large the quantization's spread could be against the difference."""
        return float(self.sd_upper / abs(self.delta)) if self.delta else np.nan

    def to_dict(self) -> dict:
        return {"members": dict(self.members), "sequences": self.sequences, "sd": self.sd,
                "sd_upper": self.sd_upper, "level": self.level,
                "bound": "upper end of the two-sided χ²(n − 1) interval for σ",
                "delta": self.delta, "sd_upper_over_delta": self.of_delta,
                "check": self.check.to_dict()}


def quant_spread(measured: dict, sequences: int, level: float, delta: float) -> QuantSpread:
    """{member: Measured} → the spread of their finite values against `delta`."""
    values = {m: float(x.value) for m, x in measured.items() if x.ok}
    return QuantSpread(values, sequences, level, float(delta), enough("spread", len(values)))
