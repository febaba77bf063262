"""The studies of one trained model, each a function of a `ModelContext` that returns one
immutable result (registered, in the order they run, in analysis/measure/registry.py).

A study reads the store, the aggregate and the results of the studies registered before it
(`m.results`), and writes nothing: files are render's (analysis/report/render.py).
"""
from __future__ import annotations

import dataclasses
from functools import cached_property

import numpy as np
from tqdm import tqdm

from analysis.fit.window import window_sensitivity
from analysis.laws.uncertainty import measured_laws
from analysis.measure.analysis import ModeCounts, PaperReference
from analysis.spectrum.observables import token_rate_rows
from analysis.spectrum.rates import EDGES, SCALE_RESIDUAL_MAX
from analysis.studies.depth import depth_study
from analysis.studies.ensemble import ensemble_across_depth, ensemble_study
from analysis.studies.memory import memory_study
from analysis.studies.nulls import null_study
from analysis.studies.nulls_depth import depth_null_study
from analysis.studies.paper import note, reference
from analysis.studies.primary import headline_of, store_settings
from analysis.studies.rows import infrared_subwindow
from analysis.studies.tables import IRTable, beta_vs_length, default_lengths
from sweep.format.settings import MODES


class ModelContext:
    """What a model study reads: the store group `st`, its aggregate `agg` (positions the
    settings skip left out), the settings, the representative (layer, L), the primary
    estimator, the fp32 resolution floors the precision study measured (`floors`: {layer:
    (λ*, how)}) and `results`, the studies measured before it, by registered name."""

    def __init__(self, st, agg, settings, layer, L, primary, floors=None, progress=False):
        self.st, self.agg, self.settings = st, agg.skipping(settings.skip_positions), settings
        self.layer, self.L, self.primary = layer, L, primary
        self.floors, self.progress = floors or {}, progress
        self.results: dict = {}

    @cached_property
    def rows(self) -> dict:
        """{modes: (rates (N, d), seq (N,))} at the representative (layer, L): token_rate_rows."""
        return token_rate_rows(self.st, self.layer, self.L, skip=self.settings.skip_positions)

    @property
    def rejected(self) -> bool:
        """The power law is rejected at the headline: its β tests are window-slope tests."""
        return self.results["headline"].power_law_rejected


def table_lengths(st, layer, lengths=None, always=None, settings=None):
    """Table I rows of one layer: `lengths`, else the settings' lengths, else 8, 16, …;
    `always` (the representative L) is added so the figures' L has a row of its own."""
    configured = lengths or (settings or store_settings(st)).lengths
    if configured and always is not None:
        configured = [*configured, always]
    return default_lengths(st.layer_length[layer], configured)


def tables(m: ModelContext) -> dict:
    """{layer: IRTable}: Table I at every swept layer, both counts, the representative L a row
    of each."""
    st, out = m.st, {}
    for ly in tqdm(st.layers, desc=f"analyze {st.name}", unit="layer", disable=not m.progress):
        rows = table_lengths(st, ly, always=min(m.L, st.layer_length[ly]), settings=m.settings)
        out[ly] = beta_vs_length(st, m.agg, ly, rows, m.settings, measured=m.floors.get(ly))
    return out


def depth(m: ModelContext) -> IRTable:
    """β across depth at L: each layer's Table I row at min(L, its length), or its longest."""
    rows, fits = [], {x: {} for x in MODES}
    for ly, t in m.results["tables"].items():
        keys = [r.L for r in t.rows]
        Lx = min(m.L, m.st.layer_length[ly])
        row = t.rows[keys.index(Lx) if Lx in keys else -1]
        rows.append(dataclasses.replace(row, key=ly))
        for x in MODES:
            fits[x][ly] = t.fits[x][row.L]
    first = next(iter(m.results["tables"].values()))
    return IRTable(rows, "layer", first.window, first.level, fits, first.modes)


def mode_counts(m: ModelContext) -> ModeCounts:
    """What each count leaves out at (layer, L) and where the stable rates lie."""
    agg = m.agg
    return ModeCounts({x: agg.special(m.layer, m.L, x) for x in MODES}, agg.threshold,
                      {x: _rate_range(agg, m.layer, m.L, x) for x in MODES},
                      agg.scale_by_eigenvector, agg.shift_by_eigenvector, SCALE_RESIDUAL_MAX)


def _rate_range(agg, layer, L, modes) -> tuple:
    """(lowest, highest) stable rate at (layer, L) to a bin: where the rates lie."""
    nz = np.nonzero(agg.hist(layer, L, modes=modes))[0]
    if not len(nz):
        return (np.nan, np.nan)
    return (float(EDGES[max(nz[0] - 1, 0)]), float(EDGES[min(nz[-1], len(EDGES) - 1)]))


def headline(m: ModelContext):
    """The primary β at the representative (layer, L): the Headline `st.beta(layer, L)` gives
    (analysis/studies/primary.py), from the same Table I cell."""
    t = m.results["tables"][m.layer]
    row = next((x for x in t.rows if x.L == m.L), t.rows[-1])
    return headline_of(row.by_mode[m.primary.modes], m.primary, m.settings, m.st.name, m.layer,
                       row.L)


def infrared(m: ModelContext) -> dict | None:
    """The primary count on the infrared sub-window (the window without its top decade)."""
    return infrared_subwindow(*m.rows[m.primary.modes], m.settings)


def sensitivity(m: ModelContext) -> dict:
    """{modes: WindowSensitivity}: β as each window edge moves, and the local exponent."""
    s = m.settings
    return {x: window_sensitivity(*m.rows[x], s.window, s.n_boot, s.level, s.seed) for x in MODES}


def laws(m: ModelContext):
    """App. B's self-averaging and K(t) laws at (layer, L), against that row's β."""
    t = m.results["tables"][m.layer]
    row = next((x for x in t.rows if x.L == m.L), t.rows[-1])
    return measured_laws(m.st, m.agg, m.layer, m.L, row, m.settings)


def stacks(m: ModelContext):
    """The stacked blocks of a store swept with `depth:` (else None)."""
    return depth_study(m.st, m.settings) if m.st.depth else None


def memory(m: ModelContext):
    """The token memory of a store swept with `memory:` (else None)."""
    return memory_study(m.st, m.settings) if m.st.group.attrs.get("memory") else None


def nulls(m: ModelContext):
    """Every observable against the model's nulls, one kind at a time (None without nulls);
    its p are raw here, counted in the analysis' family (registry.py, `family`)."""
    return null_study(m.st, m.layer, m.L, m.settings, m.primary, window_slope=m.rejected)


def nulls_depth(m: ModelContext):
    """β and the window mode density against the nulls at every shared layer, one family."""
    if m.results.get("nulls") is None:
        return None
    return depth_null_study(m.st, m.L, m.settings, m.primary, m.rejected)


def ensemble(m: ModelContext):
    """Every observable over the quantization ensemble at the representative layer (None
    without members)."""
    return ensemble_study(m.st, m.layer, m.L, m.settings, m.primary)


def ensemble_depth(m: ModelContext):
    """β and the window mode density over the ensemble at every layer it was swept (None
    without members at two layers or more)."""
    if m.results.get("ensemble") is None:
        return None
    return ensemble_across_depth(m.st, m.L, m.settings, m.primary)


def paper(m: ModelContext) -> PaperReference:
    """The papers' values beside this model, or their note where the checkpoint is theirs."""
    return PaperReference(reference(m.st.identity, m.layer, m.settings),
                          note(m.st.identity, m.layer, m.settings))
