"""The density's shape: the local exponent per half-decade of the fit window, the trained
model's with its interval and each null kind's as a band (docs/analysis.md, "The density's
shape").

β over the whole window is one slope of a density that may be curved (the power law is
rejected at every layer of SmolLM2); the shape says where it bends. Per half-decade
[lo·10^(j/2), lo·10^((j+1)/2)) inside the window (the last one that fits whole), the in-window
MLE of the modes there (window.local_exponent with width and step ½ decade, its interval from
the same resampling plan as β's), "not enough data" below the local exponent's minimum. All on
the tokens the trained model and every null share (the first sequences all of them swept,
positions start ≤ t < stop), so the band and the trained curve are like for like. Each kind's
band runs from its lowest to its highest null per half-decade, its mean drawn through it; the
kinds are never pooled. Exploratory: numbers and a figure, no verdict.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis._plot import axes_or_new, window_lines
from analysis.fit.enough import enough
from analysis.fit.window import local_exponent
from analysis.spectrum.observables import token_rate_rows
from analysis.studies.declarable import Tokens
from sweep.format.variants import families

HALF = 0.5                 # decades per sub-window and per step


@dataclass(frozen=True)
class Curve:
    """One model's local exponent per half-decade."""
    beta: np.ndarray           # (n,) NaN below the minimum
    lo: np.ndarray
    hi: np.ndarray
    n_modes: np.ndarray        # (n,)
    unit: str

    def to_dict(self) -> dict:
        ok = [bool(enough("local_exponent", n)) for n in self.n_modes]
        return {"beta": _list(np.where(ok, self.beta, np.nan)), "ci_lo": _list(np.where(ok, self.lo, np.nan)),
                "ci_hi": _list(np.where(ok, self.hi, np.nan)), "n_modes": [int(n) for n in self.n_modes],
                "checks": [enough("local_exponent", n).to_dict() for n in self.n_modes],
                "unit": self.unit}


def _list(a) -> list:
    return [float(x) if np.isfinite(x) else None for x in a]


@dataclass(frozen=True)
class DensityShape:
    """The trained curve and each null kind's band at one layer (module docstring)."""
    model: str
    layer: int
    modes: str
    window: tuple
    level: float
    tokens: Tokens
    centers: np.ndarray        # (n,) geometric centres of the half-decades
    trained: Curve
    nulls: dict                # {kind: {null name: Curve}}

    def band(self, kind) -> tuple:
        """(lowest, mean, highest) of the kind's nulls per half-decade (NaN where none has
        enough modes)."""
        rows = []
        for c in self.nulls[kind].values():
            ok = np.array([bool(enough("local_exponent", n)) for n in c.n_modes])
            rows.append(np.where(ok, c.beta, np.nan))
        b = np.array(rows, np.float64).reshape(-1, len(self.centers))          # (k, n)
        seen = np.isfinite(b).any(0)
        low = np.where(seen, np.min(np.where(np.isfinite(b), b, np.inf), 0), np.nan)
        high = np.where(seen, np.max(np.where(np.isfinite(b), b, -np.inf), 0), np.nan)
        mean = np.where(seen, np.nansum(b, 0) / np.maximum(np.isfinite(b).sum(0), 1), np.nan)
        return low, mean, high

    def to_dict(self) -> dict:
        return {"model": self.model, "layer": self.layer, "modes": self.modes,
                "window": list(self.window), "level": self.level, "width_decades": HALF,
                "sequences": self.tokens.seqs, "positions": self.tokens.positions,
                "exploratory": True, "centers": self.centers.tolist(),
                "trained": self.trained.to_dict(),
                "nulls": {k: {"band": dict(zip(("lowest", "mean", "highest"),
                                              (_list(x) for x in self.band(k)))),
                              "members": {n: c.to_dict() for n, c in v.items()}}
                          for k, v in self.nulls.items()}}

    def plot(self, ax=None):
        """The trained local exponent with its interval over each kind's band."""
        ax = axes_or_new(ax)
        for i, kind in enumerate(self.nulls):
            low, mean, high = self.band(kind)
            color = f"C{i + 1}"
            ax.fill_between(self.centers, low, high, color=color, alpha=0.2, lw=0,
                            label=f"{kind} nulls ({len(self.nulls[kind])}): lowest–highest")
            ax.semilogx(self.centers, mean, "--", color=color, lw=1)
        t = self.trained
        ok = np.array([bool(enough("local_exponent", n)) for n in t.n_modes])
        ax.errorbar(self.centers[ok], t.beta[ok], yerr=[t.beta[ok] - t.lo[ok], t.hi[ok] - t.beta[ok]],
                    fmt="o", color="C0", ms=4, capsize=2,
                    label=f"{self.model} ({self.level:.0%} interval, {t.unit})")
        ax.set_xscale("log")
        window_lines(ax, self.window)
        ax.set_xlabel("half-decade centre λ (per block)")
        ax.set_ylabel("local exponent β(λ)")
        ax.set_title(f"{self.model}, layer {self.layer}: the density's shape [{self.modes} modes]",
                     fontsize=9)
        ax.legend(fontsize=7, loc="best")
        return ax


def _curve(st, layer, tokens, settings, modes) -> tuple:
    rates, seq = token_rate_rows(tokens.view(st), layer, tokens.stop, skip=tokens.start)[modes]
    lo, hi = settings.window
    span = (lo, lo * 10 ** (HALF * np.floor(np.log10(hi / lo) / HALF)))
    le = local_exponent(rates, seq, settings.window, span=span, width=HALF, step=HALF,
                        n_boot=settings.n_boot, level=settings.level, seed=settings.seed)
    return le.centers, Curve(le.beta, le.lo, le.hi, le.n_modes, le.unit)


def density_shape(st, layer, L, settings, primary) -> DensityShape:
    """The local exponent per half-decade of model `st` at `layer` and of each of its nulls,
    on the tokens all of them share (module docstring); `settings.skip_positions` resolved."""
    kinds = families(st.root, "null").get(st.name, {})
    names = [n for v in kinds.values() for n in v]
    models = [st, *(st.model(n) for n in names)]
    stop = min(L, *(m.layer_length.get(layer, 0) for m in models))
    tokens = Tokens(min(m.n_seqs for m in models), int(settings.skip_positions), int(stop))
    centers, trained = _curve(st, layer, tokens, settings, primary.modes)
    nulls = {k: {n: _curve(st.model(n), layer, tokens, settings, primary.modes)[1] for n in v}
             for k, v in kinds.items() if all(layer in st.model(n).layers for n in v)}
    return DensityShape(st.name, int(layer), primary.modes, tuple(settings.window),
                        settings.level, tokens, centers, trained, nulls)
