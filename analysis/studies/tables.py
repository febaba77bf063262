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

The point fit and n_modes use the raw rates from the store (n_modes is the exact count in
[lo, hi]); the bootstrap CI (analysis.fit.bootstrap: its unit respects token correlation)
resamples the per-token histograms of the aggregate, which give the same N(<λ) on the grid
exactly.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field

import numpy as np

from analysis._plot import axes_or_new, sweep_colors
from analysis.fit.alternatives import ALTERNATIVES, compare_alternatives
from analysis.fit.bootstrap import bootstrap_ir_from_hists
from analysis.fit.fits import WINDOW, fit_ir_exponent, mle_ir_exponent
from analysis.fit.gof import power_law_gof
from analysis.fit.window import bootstrap_mle, edge_exponents, infrared_window, window_density
from analysis.spectrum.observables import block_classes, token_rate_rows
from analysis.spectrum.rates import N_COLS, check_modes, floor_edge, mode_key, resolution_floor
from sweep.format.settings import DEFAULT_MODES, MODES, Settings


def default_lengths(lmax, configured=None):
    """Table I lengths: the configured ones that fit in lmax (lmax itself added), else
    8, 16, … up to lmax (lmax itself included): the paper's L sweep for any store."""
    if configured:
        out = sorted({int(L) for L in configured if 1 <= int(L) <= lmax})
    else:
        out = [L for L in (2 ** k for k in range(3, 20)) if L <= lmax]
    return out + ([lmax] if not out or out[-1] != lmax else [])


@dataclass
class ModeRow:
    """One mode count at one Table I row: both β estimators with their CIs, and how well a
    power law describes the in-window rates."""
    beta: float                      # cumulative fit (the paper's estimator)
    ci_lo: float
    ci_hi: float
    r2: float
    n_modes: int                     # rates inside the window
    s: float                         # N(<λ) ∝ λ^s
    ci_unit: str                     # what its bootstrap resampled (BootstrapIR.unit)
    mle_beta: float                  # in-window MLE: the density exponent inside the window
    mle_se: float                    # Fisher se (modes taken as independent)
    mle_ci_lo: float                 # CI resampling the same units as β's
    mle_ci_hi: float
    n_below: int                     # stable modes below the window (they move `beta`, not `mle_beta`)
    ks: float                        # KS distance to the fitted bounded power law
    gof_p: float                     # its Monte-Carlo p
    local_beta_low: float            # MLE in the window's lowest decade
    local_beta_high: float           # MLE in its highest decade
    density: float = np.nan          # stable modes per token in the window (window.window_density)
    density_lo: float = np.nan       # its CI, resampling the same units
    density_hi: float = np.nan
    floor: float = 0.0               # stable modes below this λ not counted (fp32 resolution)
    n_unresolved: int = 0            # how many that left out
    floor_source: str = ""           # where the floor comes from, in words
    R_lognormal: float = np.nan      # normalised log-likelihood ratios (> 0 favours the power law)
    p_lognormal: float = np.nan
    R_exponential: float = np.nan
    p_exponential: float = np.nan
    R_stretched_exponential: float = np.nan
    p_stretched_exponential: float = np.nan
    mle_ci_unit: str = ""            # what the MLE's CI resampled (MLEInterval.unit)

    @property
    def fitted(self) -> bool:
        return self.n_modes > 0 and bool(np.isfinite(self.beta))

    @property
    def estimators_disagree(self) -> bool:
        """The two estimators' CIs do not overlap."""
        return bool(self.fitted and np.isfinite(self.mle_ci_lo)
                    and (self.ci_hi < self.mle_ci_lo or self.mle_ci_hi < self.ci_lo))


ROW_FIELDS = tuple(ModeRow.__dataclass_fields__) + ("estimators_disagree",)


@dataclass
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


@dataclass
class IRTable:
    """Rows of fitted exponents, one per L or per layer (`by`); figures draw `modes`."""
    rows: list
    by: str = "L"
    window: tuple = WINDOW
    level: float = 0.9
    fits: dict = field(default_factory=dict, repr=False)   # modes -> {key: IRFit} (Fig 7)
    modes: str = DEFAULT_MODES
    kinds: dict = field(default_factory=dict)   # {layer: kind} of a hybrid's depth table

    def column(self, name, modes=None):
        return np.array([r.get(name, modes or self.modes) for r in self.rows], dtype=float)

    def to_dicts(self):
        return [r.to_dict() for r in self.rows]

    def to_csv(self, path):
        with open(path, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(self.rows[0].to_dict()) if self.rows else [])
            w.writeheader()
            w.writerows(self.to_dicts())
        return path

    def to_markdown(self, reference=None) -> str:
        """Both counts side by side; `reference` {key: β} is the paper's (all-stable) value."""
        ref = reference or {}
        ci = f"{self.level:.0%} CI"
        head = (f"| {self.by} | β all-stable | {ci} | R² | modes in window | "
                f"β symmetry-removed | {ci} | R² | modes in window | Δβ | MLE β all-stable [{ci}] | "
                f"MLE β symmetry-removed [{ci}] |" + (" paper β |" if ref else ""))
        lines = [head, "|" + "---|" * (head.count("|") - 1)]
        for r in self.rows:
            cells = [f"{r.key} ({self.kinds[r.key]})" if r.key in self.kinds else str(r.key)]
            for m in MODES:
                if not r.by_mode[m].fitted:
                    cells += ["no modes in the window", "–", "–", "0"]
                    continue
                cells += [f"{r.get('beta', m):+.3f}",
                          f"[{r.get('ci_lo', m):+.3f}, {r.get('ci_hi', m):+.3f}]",
                          f"{r.get('r2', m):.4f}", f"{r.get('n_modes', m):,}"]
            cells.append(_num(r.delta_beta))
            cells += [_mle_cell(r.by_mode[m]) for m in MODES]
            if ref:
                cells.append(f"{ref[r.key]:+.3f}" if r.key in ref else "–")
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines + self.floor_lines())

    def density_lines(self) -> list:
        """Stable modes per token in the window, by row, of the table's mode count."""
        cells = [f"{r.key}: {_num(r.get('density', self.modes), '.3g')} [{_num(r.get('density_lo', self.modes), '.3g')}, "
                 f"{_num(r.get('density_hi', self.modes), '.3g')}]" for r in self.rows]
        unit = self.rows[-1].get("ci_unit", self.modes) if self.rows else ""
        return [f"Window mode density ({self.modes} modes per token in [{self.window[0]:g}, "
                f"{self.window[1]:g}], {self.level:.0%} CI, {unit}), by {self.by}: "
                + "; ".join(cells) + "."]

    def floor_lines(self) -> list:
        """What the all-stable count left out below the resolution floor (fp32), per row."""
        rows = [r for r in self.rows if r.by_mode["all-stable"].floor_source]
        if not rows:
            return []
        srcs = sorted({r.by_mode["all-stable"].floor_source for r in rows})
        left = ", ".join(f"{r.key}: {r.by_mode['all-stable'].n_unresolved:,}" for r in rows)
        return ["", f"all-stable (fp32) counts only λ ≥ {rows[0].by_mode['all-stable'].floor:.3g}, "
                f"{'; '.join(srcs)}; stable modes left out below it, by {self.by}: {left}."]

    def plot(self, ax=None, reference=None, label="this run", color="C0", xshift=1.0, marker="o",
             modes=None, estimator="cumulative"):
        """β of `estimator` ("cumulative" | "mle") and mode count `modes` (default the
        table's) with its CI; rows where the power law is rejected are drawn hollow, as window
        slopes. `xshift` multiplies the x positions (side-by-side models); `reference` {key:
        β}, the paper's cumulative all-stable values, is drawn only beside that estimator."""
        ax = axes_or_new(ax)
        modes = check_modes(modes or self.modes)
        pre = "mle_" if estimator == "mle" else ""
        name = f"{estimator}:{modes}"
        k, b = self.column("key") * xshift, self.column(pre + "beta", modes)
        if not np.isfinite(b).any():
            ax.text(0.5, 0.5, f"{label}: no mode in the window, nothing fitted", ha="center",
                    transform=ax.transAxes)
            return ax
        err = np.abs(np.vstack([b - self.column(pre + "ci_lo", modes),
                                self.column(pre + "ci_hi", modes) - b]))
        row = self.rows[-1].by_mode[modes] if self.rows else None
        unit = (row.mle_ci_unit if pre and row.mle_ci_unit else row.ci_unit) if row else "tokens"
        ax.errorbar(k, b, yerr=err, fmt=marker + "-", color=color, capsize=3,
                    label=f"{label}, {name}: {self.level:.0%} bootstrap CI over {unit}")
        p = self.column("gof_p", modes)
        slope = np.isfinite(p) & (p < 1 - self.level)
        if slope.any():
            ax.plot(k[slope], b[slope], marker, ms=9, mfc="white", mec=color, ls="none",
                    label=f"window slope, not an exponent: power law rejected (GOF p < "
                          f"{1 - self.level:.2g}; lowest p = {np.nanmin(p[slope]):.2g})")
        # a hybrid's layers side by side: one marker per kind of layer
        for kind, m in zip(sorted(set(self.kinds.values())), "sD^vP*"):
            on = np.array([self.kinds.get(r.key) == kind for r in self.rows])
            ax.plot(k[on], b[on], m, ms=9, mfc="none", mec="k", ls="none", label=f"{kind} layers")
        if reference and name == "cumulative:all-stable":
            rk = sorted(reference)
            ax.plot(rk, [reference[x] for x in rk], "s--", color="0.5", mfc="none",
                    label="paper, cumulative:all-stable")
        ax.axhline(0, color="k", lw=0.6)
        if self.by == "L":
            ax.set_xscale("log", base=2)
            ax.set_xlabel("sequence length L, tokens")
        else:
            ax.set_xlabel("layer")
        lo, hi = self.window
        law = "N(<λ) ∝ λ^(1+β)" if estimator == "cumulative" else "density ∝ λ^β"
        ax.set_ylabel(f"β [{name}]\n{law} on [{lo:g}, {hi:g}]")
        ax.legend(fontsize=8)
        return ax

    def plot_cumulative(self, ax=None, modes=None):
        """Fig 7: N(<λ) with the cumulative fits of mode count `modes`, one colour per row; a
        row where the power law is rejected is drawn dashed and called a window slope."""
        ax = axes_or_new(ax)
        modes = check_modes(modes or self.modes)
        fits = self.fits.get(modes, {})
        fitted = {k: f for k, f in fits.items() if np.isfinite(f.s)}
        gof = {r.key: r.by_mode[modes].gof_p for r in self.rows}
        for (key, fit), c in zip(fitted.items(), sweep_colors(len(fitted))):
            p = gof.get(key, np.nan)
            if np.isfinite(p) and p < 1 - self.level:
                fit.plot(ax, color=c, ls="--", label=f"{self.by} = {key}: window slope s − 1 = "
                         f"{fit.beta:+.3f}, power law rejected, GOF p = {p:.2g}")
            else:
                fit.plot(ax, color=c, label=f"{self.by} = {key}: β = {fit.beta:+.3f}, GOF p = "
                         f"{p:.2g}")
        if not fitted:
            ax.text(0.5, 0.5, "no mode in the window: nothing fitted", ha="center",
                    transform=ax.transAxes)
        for v in self.window:
            ax.axvline(v, color="0.6", ls=":", lw=0.8)
        ax.set_ylabel(f"N(<λ), {modes} modes; fits: cumulative:{modes}")
        return ax


def _num(v, fmt="+.3f") -> str:
    return format(v, fmt) if np.isfinite(v) else "–"


def _mle_cell(mr: ModeRow) -> str:
    if not np.isfinite(mr.mle_beta):
        return "–"
    return f"{mr.mle_beta:+.3f} [{_num(mr.mle_ci_lo)}, {_num(mr.mle_ci_hi)}]"


def gof_markdown(table: "IRTable") -> str:
    """Both estimators side by side and how well a power law fits, one line per row and count."""
    ci = f"{table.level:.0%} CI"
    head = (f"| {table.by} | count | β cumulative [{ci}] | β MLE in window [{ci}] | modes below "
            f"window | estimators | KS | GOF p | local β low / high decade | R, p vs log-normal | "
            f"R, p vs exponential | R, p vs stretched exp. | modes per token in window [{ci}] |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in table.rows:
        for m in MODES:
            x = r.by_mode[m]
            if not x.fitted:
                lines.append(f"| {r.key} | {m} | no modes in the window | – | {x.n_below:,} | – | – "
                             f"| – | – | – | – | – | 0 |")
                continue
            alts = [f"{_num(getattr(x, 'R_' + a), '+.2f')}, {_num(getattr(x, 'p_' + a), '.2g')}"
                    for a in ALTERNATIVES]
            lines.append(
                f"| {r.key} | {m} | {x.beta:+.3f} [{_num(x.ci_lo)}, {_num(x.ci_hi)}] | "
                f"{_mle_cell(x)} | {x.n_below:,} | "
                f"{'**disagree**' if x.estimators_disagree else 'CIs overlap'} | {_num(x.ks, '.4f')} | "
                f"{_num(x.gof_p, '.3f')} | {_num(x.local_beta_low)} / {_num(x.local_beta_high)} | "
                + " | ".join(alts) + f" | {_num(x.density, '.3g')} [{_num(x.density_lo, '.3g')}, "
                f"{_num(x.density_hi, '.3g')}] |")
    return "\n".join(lines)


def symmetry_modes(sr, window) -> dict:
    """Where the modes the symmetry-removed count drops sit (`sr`: its ModeClasses)."""
    lo, hi = window
    lam = np.asarray(sr.removed)
    return {"sym_removed": int(sr.scale + sr.marginal), "sym_stable": int(lam.size),
            "sym_below": int((lam < lo).sum()), "sym_inside": int(((lam >= lo) & (lam <= hi)).sum())}


def bootstrap_from_agg(agg, layer, L, modes, window, n_boot, level, seed, n_seqs=None, floor=0.0):
    """CI of β under `modes` from the per-token histograms of the done tokens t < L (L None:
    all; positions the aggregate skips are not done) of the first `n_seqs` sequences (None:
    all), each tagged with its sequence so the resampling unit can respect token correlation;
    rates below `floor` (rounded up to a bin edge, `floor_edge`) left out.
    Returns (bootstrap result, (seq, L) done mask)."""
    done = agg.token_done(layer)[:n_seqs, :L]                                # (seq, L)
    units = agg.token_hist(layer, modes=modes)[:n_seqs, :L][done].reshape(-1, N_COLS)
    col = floor_edge(floor)[1]
    if col >= 0:
        units = units.copy()
        units[:, :col + 1] = 0
    seq = np.nonzero(done)[0]                                                # (units,)
    return bootstrap_ir_from_hists(units, window, n_boot=n_boot, level=level, seed=seed,
                                   seq=seq), done


def mode_row(rates_2d, seq, boot, settings, floor=(0.0, "")) -> ModeRow:
    """Every per-count number of one row from per-token rates (N, d) and β's bootstrap; rates
    below floor[0] (rounded up to a bin edge) left out and counted, floor[1] saying why."""
    w = settings.window
    lam_f = floor_edge(floor[0])[0]
    with np.errstate(invalid="ignore"):
        low = np.isfinite(rates_2d) & (rates_2d < lam_f)
    rates_2d = np.where(low, np.nan, rates_2d)
    flat = rates_2d[np.isfinite(rates_2d)]
    fit = fit_ir_exponent(flat, w)           # = boot.fit's β bit for bit; n_modes exact in [lo, hi]
    mle = bootstrap_mle(rates_2d, seq, w, settings.n_boot, settings.level, settings.seed)
    gof = power_law_gof(flat, w, n_sims=settings.n_boot, seed=settings.seed)
    alts = {f"{x}_{name}": getattr(a, x) for name, a in compare_alternatives(flat, w).items()
            for x in ("R", "p")}
    lb, hb = edge_exponents(flat, w)
    dens = window_density(rates_2d, seq, w, settings.n_boot, settings.level, settings.seed)
    return ModeRow(beta=fit.beta, ci_lo=boot.lo, ci_hi=boot.hi, r2=fit.r2, n_modes=fit.n_modes,
                   s=fit.s, ci_unit=boot.unit, mle_beta=mle.beta,
                   mle_se=mle_ir_exponent(flat, w).se, mle_ci_lo=mle.lo, mle_ci_hi=mle.hi,
                   n_below=mle.n_below, ks=gof.ks, gof_p=gof.p_value, local_beta_low=lb,
                   local_beta_high=hb, mle_ci_unit=mle.unit, density=dens.value,
                   density_lo=dens.lo, density_hi=dens.hi, floor=lam_f,
                   n_unresolved=int(low.sum()), floor_source=floor[1], **alts)


def count_row(store, agg, layer, L, modes, settings, rows=None, measured=None):
    """One mode count at tokens skip <= t < L of one layer: its ModeRow (both estimators,
    CIs, goodness of fit) and its cumulative IRFit, under `settings`. The one computation
    behind a Table I cell and the primary β (analysis/studies/primary.py); `agg` already
    skips the settings' positions, `rows` is token_rate_rows of (layer, L) when at hand; the
    all-stable count above the store's resolution floor (`resolution_floor`, `measured`: the
    precision study's (λ*, how) at this layer or None).
    Returns (ModeRow, IRFit, (seq, L) done mask)."""
    rows = rows or token_rate_rows(store, layer, L, skip=settings.skip_positions)
    floor = resolution_floor(store.dtype, measured) if modes == "all-stable" else (0.0, "")
    boot, done = bootstrap_from_agg(agg, layer, L, modes, settings.window, settings.n_boot,
                                    settings.level, settings.seed, floor=floor[0])
    return mode_row(*rows[modes], boot, settings, floor), boot.fit, done


def infrared_subwindow(rates_2d, seq, settings) -> dict | None:
    """The in-window MLE β with its CI and the power law's goodness of fit on the infrared
    sub-window (window.infrared_window), from per-token rates (N, d); None without one."""
    w = infrared_window(settings.window)
    if w is None:
        return None
    flat = rates_2d[np.isfinite(rates_2d)]
    mle = bootstrap_mle(rates_2d, seq, w, settings.n_boot, settings.level, settings.seed)
    gof = power_law_gof(flat, w, n_sims=settings.n_boot, seed=settings.seed)
    return {"window": list(w), "estimator": "in-window MLE", "beta": mle.beta,
            "ci": [mle.lo, mle.hi], "unit": mle.unit, "dof": mle.dof, "n_modes": mle.n_modes,
            "gof_p": gof.p_value,
            "power_law_rejected": bool(np.isfinite(gof.p_value) and gof.p_value < 1 - settings.level)}


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


def _table(rows_fits, by, settings):
    rows = [r for r, _ in rows_fits]
    fits = {m: {r.key: f[m] for r, f in rows_fits} for m in MODES}
    return IRTable(rows, by, settings.window, settings.level, fits, check_modes(settings.modes))


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
    table = _table([ir_row(store, agg, ly, min(L, store.layer_length[ly]), settings, key=ly,
                           measured=measured.get(ly)) for ly in layers], "layer", settings)
    kinds = {ly: store.layer_kind(ly) for ly in layers}
    if len(set(kinds.values())) > 1:          # a hybrid: every row says which kind it is
        table.kinds = kinds
    return table
