"""β across sequence length and depth, under both mode counts: Table I and Figs 7–8.

Every row carries both counts side by side ("all-stable", the paper's, and
"symmetry-removed", see analysis.spectrum.rates), each a `ModeRow`: the cumulative-fit β (the
paper's) and the in-window MLE β, each with a CI resampling the same units, the modes below
the window, R², the power-law goodness of fit (gof.py: KS, Monte-Carlo p), the local
exponent at the window's two ends and the likelihood ratios against the alternatives
(alternatives.py); then Δβ = β_all-stable − β_symmetry-removed and where the removed modes
sit relative to the window (the reason the two β differ). Every number is computed under
one `Settings` (window, level, replicates, seed, positions skipped).

**Resolution before counting.** In an fp32 store the all-stable count leaves out the stable
modes below the resolution floor (rates.resolution_floor): the λ below which the precision study
(studies/precision.py) finds fp32's rates off by more than 10 % against an fp64 twin of the
same config at that layer, or, at a layer without such a twin, the dtype table's marginal
floor (sweep/format/dtypes.py), which no measurement backs: that all-stable β is then
comparable with the paper only in fp64 ("fp64-only"). The floor is rounded up to the next
global bin edge, so the raw-rate fit and the histogram bootstrap still agree bit for bit;
every row says how many modes it left out and why (`n_unresolved`, `floor_source`). The
modes below a floor sit under the fit window, so only the cumulative fit moves (N(<λ) counts
them), not the in-window MLE.

The numbers of one count come from analysis/studies/rows.py; how a table prints and draws,
from analysis/studies/table_views.py. The point fit and n_modes use the raw rates from the
store (n_modes is the exact count in [lo, hi]); the CI (analysis.fit.bootstrap: its unit
respects token correlation) resamples the per-token histograms of the aggregate, which give
the same N(<λ) on the grid exactly.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis.fit.fits import WINDOW
from analysis.spectrum.observables import block_classes, token_rate_rows
from analysis.spectrum.rates import check_modes, mode_key
from analysis.studies.rows import ModeRow, count_row
from analysis.studies.table_views import TableViews
from sweep.format.settings import DEFAULT_MODES, MODES, Settings


def default_lengths(lmax, configured=None):
    """Table I lengths: the configured ones that fit in lmax (lmax itself added), else
    8, 16, … up to lmax (lmax itself included): the paper's L sweep for any store."""
    if configured:
        out = sorted({int(L) for L in configured if 1 <= int(L) <= lmax})
    else:
        out = [L for L in (2 ** k for k in range(3, 20)) if L <= lmax]
    return out + ([lmax] if not out or out[-1] != lmax else [])


ROW_FIELDS = tuple(ModeRow.__dataclass_fields__) + ("estimators_disagree",)


@dataclass(frozen=True)
class IRRow:
    """One Table I row: tokens skip <= t < L of one layer, both mode counts.

    sym_removed: modes the symmetry-removed count drops (scale + marginal classes);
    sym_stable: of those, the stable ones (0 < |ζ| < 1, counted by all-stable);
    sym_below / sym_inside: of the stable ones, λ below the window / inside it.
    """
    key: int                 # L (length sweep) or layer (depth sweep)
    L: int
    layer: int
    n_tokens: int
    by_mode: dict            # {modes: ModeRow}
    delta_beta: float        # β_all-stable − β_symmetry-removed
    sym_removed: int
    sym_stable: int
    sym_below: int
    sym_inside: int

    def get(self, name, modes=None):
        """A per-mode column by its bare name (`beta`, `ci_lo`, …) or any column."""
        if name in ROW_FIELDS:
            return getattr(self.by_mode[check_modes(modes or DEFAULT_MODES)], name)
        return getattr(self, name)

    def __getattr__(self, name):
        """The flat column names of table1.csv as attributes: `row.beta_all_stable`."""
        by_mode = self.__dict__.get("by_mode", {})
        for m in by_mode:
            suffix = "_" + mode_key(m)
            if name.endswith(suffix) and name[:-len(suffix)] in ROW_FIELDS:
                return getattr(by_mode[m], name[:-len(suffix)])
        raise AttributeError(name)

    def to_dict(self) -> dict:
        """Flat: per-mode columns suffixed _all_stable / _symmetry_removed (table1.csv)."""
        out = {k: getattr(self, k) for k in ("key", "L", "layer", "n_tokens")}
        for m in MODES:
            out.update({f"{f}_{mode_key(m)}": self.get(f, m) for f in ROW_FIELDS})
        out.update({k: getattr(self, k) for k in ("delta_beta", "sym_removed", "sym_stable",
                                                  "sym_below", "sym_inside")})
        return out


@dataclass(frozen=True)
class IRTable(TableViews):
    """Rows of fitted exponents, one per L or per layer (`by`); figures draw `modes`."""
    rows: list
    by: str = "L"
    window: tuple = WINDOW
    level: float = 0.9
    fits: dict = field(default_factory=dict, repr=False)   # modes -> {key: IRFit} (Fig 7)
    modes: str = DEFAULT_MODES
    kinds: dict = field(default_factory=dict)   # {layer: kind} of a hybrid's depth table

    @property
    def columns_per_count(self) -> tuple:
        """The per-count columns of every row (fits.json `columns_per_count`)."""
        return ROW_FIELDS

    def column(self, name, modes=None):
        return np.array([r.get(name, modes or self.modes) for r in self.rows], dtype=float)

    def to_dicts(self):
        return [r.to_dict() for r in self.rows]


def symmetry_modes(sr, window) -> dict:
    """Where the modes the symmetry-removed count drops sit (`sr`: its ModeClasses)."""
    lo, hi = window
    lam = np.asarray(sr.removed)
    return {"sym_removed": int(sr.scale + sr.marginal), "sym_stable": int(lam.size),
            "sym_below": int((lam < lo).sum()), "sym_inside": int(((lam >= lo) & (lam <= hi)).sum())}


def ir_row(store, agg, layer, L, settings=None, key=None, measured=None):
    """Both estimators, CIs, goodness of fit of both mode counts for tokens
    skip <= t < L of one layer, the all-stable count above the store's resolution floor
    (`resolution_floor`, `measured`: the precision study's (λ*, how) at this layer or None);
    returns (IRRow, {modes: IRFit})."""
    settings = settings or Settings()
    skip = settings.skip_positions
    agg = agg.skipping(skip)
    classes = block_classes(store, layer, L, skip=skip)
    rows = token_rate_rows(store, layer, L, skip=skip)
    by_mode, fits = {}, {}
    for m in MODES:
        by_mode[m], fits[m], done = count_row(store, agg, layer, L, m, settings, rows, measured)
    row = IRRow(key=L if key is None else key, L=int(L), layer=int(layer), n_tokens=int(done.sum()),
                by_mode=by_mode, delta_beta=by_mode["all-stable"].beta - by_mode["symmetry-removed"].beta,
                **symmetry_modes(classes["symmetry-removed"], settings.window))
    return row, fits


def _table(rows_fits, by, settings, kinds=None):
    rows = [r for r, _ in rows_fits]
    fits = {m: {r.key: f[m] for r, f in rows_fits} for m in MODES}
    return IRTable(rows, by, settings.window, settings.level, fits, check_modes(settings.modes),
                   kinds or {})


def beta_vs_length(store, agg, layer, lengths=None, settings=None, measured=None):
    """Table I for one layer: β(L) over prefix lengths L, both mode counts (`measured`: the
    precision study's floor at this layer, `ir_row`)."""
    settings = settings or Settings()
    lengths = lengths or default_lengths(store.layer_length[layer], settings.lengths)
    return _table([ir_row(store, agg, layer, L, settings, measured=measured) for L in lengths],
                  "L", settings)


def beta_vs_depth(store, agg, L, layers=None, settings=None, measured=None):
    """β at fixed L across the stored layers (layers shorter than L use their own length);
    `measured`: {layer: (λ*, how)} of the precision study."""
    settings = settings or Settings()
    layers = layers or store.layers
    measured = measured or {}
    kinds = {ly: store.layer_kind(ly) for ly in layers}
    hybrid = len(set(kinds.values())) > 1     # a hybrid: every row says which kind it is
    return _table([ir_row(store, agg, ly, min(L, store.layer_length[ly]), settings, key=ly,
                          measured=measured.get(ly)) for ly in layers], "layer", settings,
                  kinds if hybrid else None)
