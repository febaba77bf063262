"""The one settings object of an analysis, the config's `analysis:` section that a store
records (root attribute `analysis`): every number `tdos analyze`, `tdos compare`, the
live view and the summary print is computed under one `Settings`, so the window (and the
level, the replicates, the positions skipped) reaches every number.

Where the values come from, last wins: the defaults below, then the config's `analysis:`
section as the sweep recorded it in the store's root attributes (`analysis`), then the
command line. `Settings.check` is the one validation; sweep/config/load.py calls it for the
YAML section and turns its message into a ConfigError.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

# the two mode counts every TDOS, count, fit and table carries side by side (what each
# counts: analysis/spectrum/rates.py); named here because the recorded `analysis.modes` and
# `analysis.primary` name them
MODES = ("all-stable", "symmetry-removed")
DEFAULT_MODES = "all-stable"    # the paper's count: what a comparison with its Table I needs

WINDOW = (1e-4, 5e-2)       # the paper's fit window in λ (docs/paper.md)
FIELDS = ("window", "level", "n_boot", "modes", "lengths", "layer", "skip_positions", "seed",
          "memory_window", "primary")
ESTIMATORS = ("cumulative", "mle")   # least squares of log N(<λ) (the paper's); in-window MLE
PRIMARIES = tuple(f"{e}:{m}" for e in ESTIMATORS for m in MODES)
PAPER_PRIMARY = "cumulative:all-stable"          # the paper's estimator and count
RECOMMENDED_PRIMARY = "mle:symmetry-removed"   # tdos' (docs/analysis.md, "The primary estimator")


class Auto(int):
    """`skip_positions: auto`, the default: position 0 leaves every number where the store's
    inputs put a BOS there (`Settings.resolve_skip`). Until resolved against a store it keeps
    every position, as 0 does, so a Settings made without one computes what it always did."""

    def __new__(cls, *_):                 # (copy and pickle pass the value back)
        return super().__new__(cls, 0)

    def __repr__(self) -> str:
        return "'auto'"

    def __str__(self) -> str:
        return "auto"


AUTO = Auto()


class SettingsError(ValueError):
    """One line, `analysis.<field>: <what> — <fix>`."""


@dataclass(frozen=True)
class Settings:
    """What an analysis computes its numbers under (docs/analysis.md, "Settings")."""
    window: tuple = WINDOW          # (lo, hi) in λ: every fit, GOF, kernel time range, band
    level: float = 0.9              # confidence level of every interval and verdict
    n_boot: int = 500               # bootstrap replicates per CI; Monte-Carlo sets per GOF p
    modes: str = DEFAULT_MODES      # the mode count figures draw (tables carry both)
    lengths: tuple | None = None    # Table I rows (prefix lengths L); None: 8, 16, 32, …
    layer: int | None = None        # representative layer; None: 24 when stored, else middle
    skip_positions: int = AUTO      # positions t < k left out of every number; auto: 1 after a BOS
    seed: int = 0                   # seed of every resampling and simulation
    memory_window: tuple | None = None   # (k_lo, k_hi) lags of the memory fits; None: conv width..lags
    primary: str | None = None      # "estimator:modes" of headlines and verdicts; None: `primary_for`

    def __post_init__(self):
        lengths = None if self.lengths is None else tuple(int(L) for L in self.lengths)
        object.__setattr__(self, "window", tuple(float(v) for v in self.window))
        object.__setattr__(self, "lengths", lengths)
        if self.memory_window is not None:
            mw = self.memory_window
            object.__setattr__(self, "memory_window", tuple(mw) if isinstance(mw, (list, tuple)) else (mw,))
        self.check()

    def check(self) -> "Settings":
        """Raise SettingsError naming the first bad field; return self."""
        lo, hi = self.window if len(self.window) == 2 else (math.nan, math.nan)
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo < hi):
            _bad("window", f"needs two rates 0 < lo < hi, got {list(self.window)}",
                 "e.g. [1.0e-4, 5.0e-2]")
        if not 0 < self.level < 1:
            _bad("level", f"must lie strictly between 0 and 1, got {self.level}", "e.g. 0.9")
        if _not_int(self.n_boot) or self.n_boot < 20:
            _bad("n_boot", f"must be an integer >= 20, got {self.n_boot!r}", "e.g. 500")
        if self.modes not in MODES:
            _bad("modes", f"{self.modes!r} is not one of {', '.join(MODES)}", "e.g. all-stable")
        if self.lengths is not None and (not self.lengths or min(self.lengths) < 1):
            _bad("lengths", f"expected a list of token counts >= 1, got {list(self.lengths)}",
                 "e.g. [8, 16, 24, 28]")
        if self.layer is not None and (_not_int(self.layer) or self.layer < 0):
            _bad("layer", f"must be a layer index >= 0, got {self.layer!r}", "e.g. 24")
        if self.skip_positions == "auto":
            object.__setattr__(self, "skip_positions", AUTO)
        if _not_int(self.skip_positions) or self.skip_positions < 0:
            _bad("skip_positions", f"must be auto or an integer >= 0, got {self.skip_positions!r}",
                 "auto drops position 0 where it holds a BOS; 0 keeps every position")
        if _not_int(self.seed) or self.seed < 0:
            _bad("seed", f"must be an integer >= 0, got {self.seed!r}", "e.g. 0")
        mw = self.memory_window
        if mw is not None and not (len(mw) == 2 and not any(_not_int(k) for k in mw)
                                   and 1 <= mw[0] < mw[1]):
            _bad("memory_window", f"expected two lags 1 <= k_lo < k_hi, got {list(mw)}",
                 "e.g. [1, 64]")
        if self.primary is not None and self.primary not in PRIMARIES:
            _bad("primary", f"{self.primary!r} is not one of {', '.join(PRIMARIES)}",
                 f"e.g. {PAPER_PRIMARY} (the paper's) or {RECOMMENDED_PRIMARY} (tdos')")
        return self

    def primary_for(self, reproduction: bool) -> "Primary":
        """The β estimator and mode count that headlines and verdicts use: `primary` when set,
        else the paper's where this analysis reproduces the paper's setting, else tdos'."""
        if self.primary is not None:
            name, why = self.primary, "analysis.primary"
        elif reproduction:
            name, why = PAPER_PRIMARY, "the paper's (a reproduction of its setting)"
        else:
            name, why = RECOMMENDED_PRIMARY, "tdos' recommendation (docs/analysis.md)"
        estimator, modes = name.split(":")
        return Primary(estimator, modes, why)

    def resolve_skip(self, position0_is_bos: bool) -> "Settings":
        """`auto` made a number for a store whose inputs do (1) or do not (0) put a BOS at
        position 0; a number stays as it is."""
        if not isinstance(self.skip_positions, Auto):
            return self
        return dataclasses.replace(self, skip_positions=int(bool(position0_is_bos)))

    def replace(self, **changes) -> "Settings":
        """A copy with `changes`; None values leave a field as it is (CLI flags not given)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else "auto" if isinstance(v, Auto) else v)
                for k, v in dataclasses.asdict(self).items()}

    def describe(self) -> str:
        """One line for reports: what every number here was computed under."""
        skip = (f"; token positions t < {self.skip_positions} left out" if self.skip_positions
                else "; position 0 left out after a BOS (auto)" if isinstance(self.skip_positions, Auto)
                else "; every token position")
        return (f"window [{self.window[0]:g}, {self.window[1]:g}], {self.level:.0%} intervals, "
                f"{self.n_boot} replicates, seed {self.seed}{skip}")

    @classmethod
    def from_store(cls, root_attrs, **overrides) -> "Settings":
        """The store's recorded `analysis:` section (unknown keys ignored: an older tdos may
        have written fewer), then `overrides` (None = not given)."""
        recorded = dict((root_attrs or {}).get("analysis") or {})
        base = {k: v for k, v in recorded.items() if k in FIELDS and v is not None}
        if "window" in base:
            base["window"] = parse_window(base["window"], "analysis.window")
        return cls(**base).replace(**overrides)


@dataclass(frozen=True)
class Primary:
    """The β that headlines, verdicts and `tdos compare` use."""
    estimator: str     # "cumulative" | "mle"
    modes: str         # "all-stable" | "symmetry-removed"
    why: str           # where the choice came from, in words

    @property
    def name(self) -> str:
        return f"{self.estimator}:{self.modes}"

    @property
    def field(self) -> str:
        """Table I's column of this estimator (ModeRow field)."""
        return "beta" if self.estimator == "cumulative" else "mle_beta"

    def describe(self) -> str:
        what = ("cumulative least-squares fit of log N(<λ)" if self.estimator == "cumulative"
                else "in-window maximum-likelihood fit")
        return f"primary β: {what}, {self.modes} modes ({self.name}; {self.why})"


def parse_window(value, where="analysis.window") -> tuple:
    """[lo, hi] as numbers; PyYAML reads `1e-4` (no dot) as a string, so numeric strings are
    accepted too."""
    try:
        if not isinstance(value, (list, tuple)):
            raise TypeError
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise SettingsError(f"{where}: expected two rates [lo, hi], got {value!r} — e.g. "
                            f"[1.0e-4, 5.0e-2]") from None
    return lo, hi


def _not_int(v) -> bool:
    return not isinstance(v, int) or isinstance(v, bool)


def _bad(name, what, fix):
    raise SettingsError(f"analysis.{name}: {what} — {fix}")
