"""The primary β of a store: one estimator and mode count, chosen before looking
(`analysis.primary`, else `Settings.primary_for`), at the representative layer and L.

`tdos analyze`'s headline, `st.beta(layer, L)`, the status table, the summary at the end of a
sweep and the live view all print a `Headline` made here, by `headline_of` from the ModeRow
that `tables.count_row` computes: one function for the number, one for the words, so a change
to an estimator or its interval reaches every view at once. Every other estimator and mode
count is a diagnostic.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis._format import replicates_words
from analysis.fit.enough import Enough, enough
from analysis.fit.fits import fit_ir_exponent, mle_ir_exponent
from analysis.io.aggregate import aggregate
from analysis.spectrum.observables import token_rate_rows
from analysis.studies.paper import reference
from analysis.studies.positions import resolve_skip
from analysis.studies.rows import count_row
from sweep.format.settings import Primary, Settings

PAPER_LAYER = 24             # the layer of the paper's Table I (Mamba-370M)
MAX_L = 128                  # the representative L: the paper's, or the layer's length below it


def store_settings(st, **overrides) -> Settings:
    """The config's `analysis:` section as the sweep recorded it, then `overrides`, with
    `skip_positions: auto` made a number for this store (studies/positions.py)."""
    return resolve_skip(Settings.from_store(st.root.attrs, **overrides), st)


def representative(st, layer=None, settings=None) -> tuple[int, int]:
    """A stored layer: `layer` (else the settings' layer) when the store holds it, else 24
    (the paper's) when stored, else the middle stored layer; L = 128 or its max."""
    layer, _ = _pick(st, layer, settings or store_settings(st))
    return layer, min(MAX_L, st.layer_length[layer])


def why_representative(st, layer=None, settings=None) -> str:
    """The rule that picked the representative (layer, L), in words (report.md says it)."""
    layer, why = _pick(st, layer, settings or store_settings(st))
    n = st.layer_length[layer]
    length = (f"L = {MAX_L}, the paper's" if n >= MAX_L
              else f"L = {n}, the layer's full length (the paper's {MAX_L} is longer)")
    return f"layer {layer}, {why}; {length}"


def _pick(st, layer, settings) -> tuple[int, str]:
    wanted, src = (layer, "--layer") if layer is not None else (settings.layer, "analysis.layer")
    if wanted is not None and int(wanted) in st.layers:
        return int(wanted), f"chosen by {src}"
    skipped = f" ({src} {wanted} is not stored)" if wanted is not None else ""
    if PAPER_LAYER in st.layers:
        return PAPER_LAYER, f"the paper's layer{skipped}"
    stored = sorted(st.layers)          # a grown store appends its rows out of order
    return (stored[len(stored) // 2], f"the middle of the stored layers {stored}"
            f" (no analysis.layer set; the paper's layer {PAPER_LAYER} is not stored){skipped}")


def primary_of(st, settings=None) -> Primary:
    """The store's primary estimator and mode count: `analysis.primary`, else the paper's
    where the representative layer reproduces the paper's setting, else tdos'."""
    settings = settings or store_settings(st)
    layer, _ = representative(st, settings=settings)
    return settings.primary_for(bool(reference(st.identity, layer, settings)))


@dataclass(frozen=True)
class Headline:
    """The primary β at one (layer, L), said with how it was made (REFEREE 4, 7, 11)."""
    model: str
    layer: int
    L: int
    estimator: str              # "cumulative" | "mle"
    modes: str                  # "all-stable" | "symmetry-removed"
    why: str                    # where the choice of estimator came from
    beta: float                 # NaN when the window holds no mode
    ci: tuple                   # (lo, hi) percentile interval at `level`
    level: float
    unit: str                   # what the interval resampled
    n_boot: int
    n_modes: int                # modes inside the window
    window: tuple
    gof_p: float                # Monte-Carlo p of the bounded power law on the window

    @property
    def name(self) -> str:
        return f"{self.estimator}:{self.modes}"

    @property
    def fitted(self) -> bool:
        return self.n_modes > 0 and bool(np.isfinite(self.beta))

    @property
    def check(self) -> Enough:
        """β held against its minimum of modes in the window (fit/enough.py)."""
        return enough("beta", self.n_modes)

    @property
    def power_law_rejected(self) -> bool:
        return bool(self.check and np.isfinite(self.gof_p) and self.gof_p < 1 - self.level)

    @property
    def reads_as(self) -> str:
        if not self.check:
            return self.check.text
        return "a window slope, not an exponent" if self.power_law_rejected else "an exponent"

    def value(self) -> str:
        """β [CI] and what it reads as, one phrase; "not enough data (n = …, needs …)" below
        β's minimum, with no verdict."""
        if not self.fitted:
            return f"not fitted: no {self.modes} mode in the window [{self.window[0]:g}, {self.window[1]:g}]"
        if not self.check:
            return self.check.text
        num = f"{self.beta:+.3f} [{self.ci[0]:+.3f}, {self.ci[1]:+.3f}]"
        if self.power_law_rejected:
            return (f"β: a window slope, not an exponent (power law rejected, p = {self.gof_p:.3g}): "
                    f"{num}")
        return f"β = {num} (power law not rejected, p = {self.gof_p:.3g})"

    def describe(self) -> str:
        """One line: the value, then everything it depends on."""
        return (f"{self.model} layer {self.layer}, L = {self.L}: {self.value()}; {self.name}, "
                f"{self.n_modes:,} modes in [{self.window[0]:g}, {self.window[1]:g}], "
                f"{self.level:.0%} CI over {self.unit} ({replicates_words(self.unit, self.n_boot)})")

    def describe_choice(self) -> str:
        """Which β this is and why, in words."""
        what = "cumulative fit" if self.estimator == "cumulative" else "in-window MLE"
        return f"primary β ({self.name}: {what}, {self.modes} modes; {self.why})"

    def __str__(self) -> str:
        return self.describe()

    def to_dict(self) -> dict:
        return {"beta": self.beta, "ci": list(self.ci), "unit": self.unit, "n_modes": self.n_modes,
                "gof_p": self.gof_p, "power_law_rejected": self.power_law_rejected,
                "reads_as": self.reads_as, "estimator": self.estimator, "modes": self.modes,
                "layer": self.layer, "L": self.L, "level": self.level, "n_boot": self.n_boot,
                "window": list(self.window), "check": self.check.to_dict()}


def headline_of(x, primary: Primary, settings: Settings, model, layer, L) -> Headline:
    """The Headline of ModeRow `x` (tables.count_row) under `primary`."""
    mle = primary.field == "mle_beta"
    ci = (x.mle_ci_lo, x.mle_ci_hi) if mle else (x.ci_lo, x.ci_hi)
    unit = (x.mle_ci_unit or x.ci_unit) if mle else x.ci_unit
    return Headline(model, int(layer), int(L), primary.estimator, primary.modes, primary.why,
                    float(getattr(x, primary.field)), tuple(float(v) for v in ci), settings.level,
                    unit, settings.n_boot, int(x.n_modes), tuple(settings.window), float(x.gof_p))


def primary_beta(st, layer, L=None, settings=None, agg=None) -> Headline:
    """The store's primary β at (layer, L) under its recorded analysis settings (`settings`
    overrides them): what `tdos analyze` prints as the headline when (layer, L) is the
    representative one, and as the layer's row of "β across depth" otherwise. L default: the
    representative L, or the layer's length when shorter. `agg`: the model's aggregate
    (default: brought up to date beside the store)."""
    settings = resolve_skip(settings or store_settings(st), st)
    if layer not in st.layers:
        raise ValueError(f"layer {layer} is not stored; stored layers: {st.layers}")
    L = int(L) if L is not None else min(representative(st, settings=settings)[1],
                                         st.layer_length[layer])
    if not settings.skip_positions < L <= st.layer_length[layer]:
        raise ValueError(f"L = {L} at layer {layer}: expected {settings.skip_positions} < L <= "
                         f"{st.layer_length[layer]} (the tokens swept at that layer)")
    agg = (agg or aggregate(st.path).model(st.name)).skipping(settings.skip_positions)
    primary = primary_of(st, settings)
    x, _, _ = count_row(st, agg, layer, L, primary.modes, settings)
    return headline_of(x, primary, settings, st.name, layer, L)


def primary_point(st, layer, L, primary: Primary, settings: Settings) -> float:
    """The primary estimator's point β alone, no interval or GOF (the nulls' band in the
    views): the same fit of the same in-window rates as `count_row`'s."""
    rates = token_rate_rows(st, layer, L, skip=settings.skip_positions)[primary.modes][0]
    fit = mle_ir_exponent if primary.estimator == "mle" else fit_ir_exponent
    return float(fit(rates[np.isfinite(rates)], settings.window).beta)
