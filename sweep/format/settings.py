"""The one settings object of an analysis, the config's `analysis:` section that a store
records (root attribute `analysis`): every number `tdos analyze`, `tdos compare`, the
live view and the summary print is computed under one `Settings`, so the window (and the
level, the replicates, the positions skipped) reaches every number.

Where the values come from, last wins: the defaults below, then the config's `analysis:`
section as the sweep recorded it in the store's root attributes (`analysis`), then the
command line. Each field is declared once, with its help and its check
(sweep/format/fields.py): the config loader accepts exactly these fields and turns a
SettingsError into its ConfigError, `tdos analyze` and `tdos compare` make their flags from
them, and docs/config.md's `analysis.*` rows are generated from them.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from sweep.format.fields import Check, FieldError, at_least, declared, first_problem, one_of, option

# the two mode counts every TDOS, count, fit and table carries side by side (what each
# counts: analysis/spectrum/rates.py); named here because the recorded `analysis.modes` and
# `analysis.primary` name them
MODES = ("all-stable", "symmetry-removed")
DEFAULT_MODES = "all-stable"    # the paper's count: what a comparison with its Table I needs

WINDOW = (1e-4, 5e-2)       # the paper's fit window in λ (docs/paper.md)
ESTIMATORS = ("cumulative", "mle")   # least squares of log N(<λ) (the paper's); in-window MLE
PRIMARIES = tuple(f"{e}:{m}" for e in ESTIMATORS for m in MODES)
PAPER_PRIMARY = "cumulative:all-stable"          # the paper's estimator and count
RECOMMENDED_PRIMARY = "mle:symmetry-removed"   # tdos' (docs/analysis.md, "The primary estimator")
SEE = "analysis.md#settings-the-analysis-section"


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


class FromAuto(int):
    """`auto` resolved against a store: 1 where its inputs put a BOS at position 0, else 0;
    the type remembers that the number came from the rule (the report says which)."""

    def __new__(cls, value=0):
        return super().__new__(cls, value)


def _skip(value):
    """A `--skip-positions` argument: `auto` or a count."""
    return AUTO if value == "auto" else int(value)


class SettingsError(FieldError):
    """One line, `analysis.<field>: <what> — <fix>`."""


def _window_ok(w) -> bool:
    return len(w) == 2 and all(math.isfinite(v) for v in w) and 0 < w[0] < w[1]


def _ints(v) -> bool:
    return all(not _not_int(x) for x in v)


@dataclass(frozen=True)
class Settings:
    """What an analysis computes its numbers under (docs/analysis.md, "Settings"): the
    config's `analysis:` section, one declaration (sweep/format/fields.py) from which the
    YAML fields, the flags of `tdos analyze` / `tdos compare` and docs/config.md's table
    are made."""
    window: tuple = option(
        WINDOW, "fit window in λ of every fit, GOF, band and the kernel's time range",
        kind="two rates 0 < lo < hi", default_text="default the paper's [1e-4, 5e-2]", see=SEE,
        flag={"nargs": 2, "type": float, "metavar": ("LO", "HI")},
        check=Check(_window_ok, "needs two rates 0 < lo < hi, got {v}", "e.g. [1.0e-4, 5.0e-2]"))
    level: float = option(
        0.9, "confidence level of every interval and verdict", kind="number in (0, 1)",
        flag={"metavar": "P"},
        check=Check(lambda v: 0 < v < 1, "must lie strictly between 0 and 1, got {v}", "e.g. 0.9"))
    n_boot: int = option(
        500, "bootstrap replicates per interval; Monte-Carlo sets per GOF p", flag={"metavar": "N"},
        check=at_least(20, "e.g. 500", what="must be an integer >= 20, got {v!r}", integer=True))
    modes: str = option(
        DEFAULT_MODES, "the mode count the figures draw (tables carry both): all-stable, the "
        "paper's, counts every 0 < |ζ| < 1; symmetry-removed also drops the norm's "
        "invariant-direction and marginal modes", check=one_of(MODES, "e.g. all-stable"))
    lengths: tuple | None = option(
        None, "Table I rows (prefix lengths L); null: 8, 16, 32, … and L_max",
        kind="list of integers >= 1", flag={"nargs": "+", "type": int, "metavar": "L"},
        check=Check(lambda v: v and _ints(v) and min(v) >= 1,
                    "expected a list of token counts >= 1, got {v}", "e.g. [8, 16, 24, 28]"))
    layer: int | None = option(
        None, "the representative layer (must be swept); null: 24 when stored, else the middle "
        "swept layer", flag={"metavar": "N"},
        check=at_least(0, "e.g. 24", what="must be a layer index >= 0, got {v!r}", integer=True))
    skip_positions: int | str = option(
        AUTO, "token positions t < k left out of every number; `auto`: position 0 where the "
        "store's inputs put a BOS there (the report says how many it dropped), else none",
        kind="`auto` or integer >= 0", default_text="default auto", flag={"metavar": "K", "type": _skip},
        check=Check(lambda v: isinstance(v, Auto) or (not _not_int(v) and v >= 0),
                    "must be auto or an integer >= 0, got {v!r}",
                    "auto drops position 0 where it holds a BOS; 0 keeps every position"))
    seed: int = option(0, "seed of every resampling and simulation", flag={"metavar": "S"},
                       check=at_least(0, "e.g. 0", what="must be an integer >= 0, got {v!r}",
                                      integer=True))
    memory_window: tuple | None = option(
        None, "lags of the token-memory fits; null: the causal convolution's width (or 1) .. "
        "`memory.lags`", kind="two lags 1 <= k_lo < k_hi",
        flag={"nargs": 2, "type": int, "metavar": ("K_LO", "K_HI")},
        check=Check(lambda v: len(v) == 2 and _ints(v) and 1 <= v[0] < v[1],
                    "expected two lags 1 <= k_lo < k_hi, got {v}", "e.g. [1, 64]"))
    primary: str | None = option(
        None, "the β estimator and mode count of headlines and verdicts (`cumulative:all-stable`, "
        "the paper's, or `mle:symmetry-removed`, tdos'); null: the paper's for its own setting, "
        "else tdos'", see="analysis.md#the-primary-estimator", flag={"metavar": "ESTIMATOR:MODES"},
        check=one_of(PRIMARIES, f"e.g. {PAPER_PRIMARY} (the paper's) or {RECOMMENDED_PRIMARY} "
                                f"(tdos')"))

    def __post_init__(self):
        # the values as the checks and every reader want them: tuples of numbers where the
        # YAML or a flag gave lists; anything else is left for `check` to name
        object.__setattr__(self, "window", parse_window(self.window))
        if self.skip_positions == "auto":
            object.__setattr__(self, "skip_positions", AUTO)
        for name in ("lengths", "memory_window"):
            value = getattr(self, name)
            if isinstance(value, (list, tuple)) and _ints(value):
                object.__setattr__(self, name, tuple(int(v) for v in value))
        self.check()

    def check(self) -> "Settings":
        """Raise SettingsError naming the first bad field; return self."""
        problem = first_problem(self, "analysis")
        if problem:
            raise SettingsError(problem)
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
        return dataclasses.replace(self, skip_positions=FromAuto(bool(position0_is_bos)))

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


FIELDS = tuple(f.name for f in declared(Settings))     # the recorded `analysis:` keys
