"""Token positions: position 0 out of every fit where the inputs put a BOS there, and β per
position bin, so a reader sees whether β is stationary in t (docs/analysis.md, "Positions").

**The BOS rule.** A sweep records, per model group, how its inputs placed position 0
(`inputs.position0_is_bos`, sweep/plan/windows.py). The default `analysis.skip_positions:
auto` (sweep/format/settings.py) becomes 1 when any trained model of the store has a BOS at
position 0 and 0 otherwise (`resolve_skip`): one rule for the whole store, so every model and
its nulls are read at the same positions. A BOS token opens every sequence with the same
input, so its J_tt is one matrix repeated S times, not a sample of the text; on SmolLM2 its
block sums have an excess kurtosis of about 13 on one sequence. An explicit number stays as
given. `bos_rule` says what was decided and how many positions left (`to_dict` for fits.json,
`text` for the report).

**β per position bin.** The primary β of the tokens start ≤ t < stop of every sequence, for
bins that double in length from the first kept position ([1, 8), [8, 16), [16, 32), …, the
last one ending at L), each with its interval (the plan of resampling.py over the sequences)
and its modes, "not enough data" below β's minimum. Exploratory: no verdict; a trend in t
shows as bins whose intervals do not overlap.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis._plot import axes_or_new
from analysis.studies.declarable import DECLARABLE, Context, Tokens
from sweep.format.settings import Auto, FromAuto, Settings
from sweep.format.variants import trained_models


@dataclass(frozen=True)
class BosRule:
    """What `skip_positions` was resolved to for one store, and why."""
    skip: int
    rule: str                  # "auto" | "set"
    bos_models: tuple          # trained models whose inputs put a BOS at position 0
    unknown: tuple             # trained models whose inputs record no BOS rule
    dropped: dict              # {model: token positions left out (sequences × skip)}

    @property
    def text(self) -> str:
        what = (f"position{'s' if self.skip > 1 else ''} t < {self.skip} left out of every number"
                if self.skip else "every position kept")
        why = (f"auto: {', '.join(self.bos_models)} start{'s' if len(self.bos_models) == 1 else ''} "
               f"each sequence with a BOS" if self.rule == "auto" and self.skip else
               "auto: no model's inputs put a BOS at position 0" if self.rule == "auto" else
               "analysis.skip_positions")
        n = sum(self.dropped.values())
        unknown = (f"; {', '.join(self.unknown)} record{'s' if len(self.unknown) == 1 else ''} "
                   f"no BOS rule" if self.unknown else "")
        return f"{what} ({why}): {n:,} token positions dropped{unknown}"

    def to_dict(self) -> dict:
        return {"skip_positions": self.skip, "rule": self.rule, "bos_models": list(self.bos_models),
                "no_bos_record": list(self.unknown), "dropped": dict(self.dropped),
                "text": self.text}


def _bos(st, name):
    rec = st.model(name).inputs
    return rec.get("position0_is_bos")


def bos_rule(st, settings: Settings) -> BosRule:
    """How `settings.skip_positions` reads for the store of `st` (module docstring)."""
    names = trained_models(st.root)
    found = {n: _bos(st, n) for n in names}
    bos = tuple(n for n, b in found.items() if b)
    auto = isinstance(settings.skip_positions, (Auto, FromAuto))
    skip = int(bool(bos)) if auto else int(settings.skip_positions)
    dropped = {n: st.model(n).n_seqs * skip for n in names}
    return BosRule(skip, "auto" if auto else "set", bos,
                   tuple(n for n, b in found.items() if b is None), dropped)


def resolve_skip(settings: Settings, st) -> Settings:
    """`settings` with `skip_positions: auto` made a number for the store of `st`."""
    if not isinstance(settings.skip_positions, Auto):
        return settings
    return settings.resolve_skip(bool(bos_rule(st, settings).bos_models))


def position_bins(start, L) -> list:
    """[(t0, t1)]: [start, 8), [8, 16), … doubling, the last ending at L (module docstring)."""
    edges, e = [start], 8
    while e < L:
        if e > start:
            edges.append(e)
        e *= 2
    edges.append(L)
    return [(a, b) for a, b in zip(edges[:-1], edges[1:]) if b > a]


@dataclass(frozen=True)
class PositionBins:
    """The primary β per position bin at one layer (module docstring)."""
    model: str
    layer: int
    estimator: str
    bins: tuple                # ((t0, t1),)
    values: tuple              # (Measured,) one per bin

    def to_dict(self) -> dict:
        return {"model": self.model, "layer": self.layer, "estimator": self.estimator,
                "exploratory": True,
                "bins": [{"start": a, "stop": b, **m.to_dict()}
                         for (a, b), m in zip(self.bins, self.values)]}

    def plot(self, ax=None):
        """β against position, each bin's interval as a bar across its positions."""
        ax = axes_or_new(ax)
        for (a, b), m in zip(self.bins, self.values):
            if not m.ok:
                ax.axvspan(a, b, color="0.92", lw=0)
                continue
            mid = np.sqrt(max(a, 0.5) * b)
            ax.errorbar([mid], [m.value], yerr=[[m.value - m.lo], [m.hi - m.value]], fmt="o",
                        color="C0", ms=4, capsize=2)
            ax.hlines(m.value, a, b, color="C0", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("token position t (bins; grey: not enough data)")
        ax.set_ylabel(f"primary β ({self.estimator})")
        ax.set_title(f"{self.model}, layer {self.layer}: β per position bin", fontsize=9)
        return ax


def beta_by_position(st, layer, L, settings: Settings, primary) -> PositionBins:
    """The primary β of each position bin of `layer` over every sequence of `st`."""
    settings = resolve_skip(settings, st)
    ctx = Context(settings, primary)
    bins = position_bins(int(settings.skip_positions), int(L))
    values = tuple(DECLARABLE["beta"].measure(st, layer, Tokens(st.n_seqs, a, b), ctx)
                   for a, b in bins)
    return PositionBins(st.name, int(layer), primary.name, tuple(bins), values)
