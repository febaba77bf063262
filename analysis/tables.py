"""β across sequence length and depth, under both mode counts: Table I and Figs 7–8.

Every row carries both counts side by side ("all-stable", the paper's, and
"symmetry-removed", see analysis.rates): β, its CI, R², modes in the window and the MLE of
each, their difference Δβ = β_all-stable − β_symmetry-removed, and where the removed modes
sit relative to the window (the reason the two β differ).

The point fit and n_modes use the raw rates from the store (n_modes is the exact count in
[lo, hi]); the bootstrap CI (analysis.bootstrap: its unit respects token correlation)
resamples the per-token histograms of the aggregate, which give the same N(<λ) on the grid
exactly.
"""
from __future__ import annotations

import csv
from dataclasses import asdict, dataclass, field

import numpy as np

from ._plot import axes_or_new, sweep_colors
from .bootstrap import bootstrap_ir_from_hists
from .fits import WINDOW, fit_ir_exponent, mle_ir_exponent
from .observables import block_classes
from .rates import DEFAULT_MODES, MODES, N_COLS, check_modes, mode_key

# Paper Table I (layer 24, Mamba-370M): L -> β (all-stable: the paper counts every stable mode)
PAPER_BETA = {8: -0.228, 16: -0.198, 32: -0.182, 64: -0.170, 128: -0.165, 256: -0.169, 512: -0.168}
PAPER_MODES = {8: 2719, 512: 156593}
# Companion paper (Pythia-410M): L -> β
PAPER_PYTHIA = {8: -0.121, 16: -0.128, 24: -0.10, 28: -0.10}
# columns that exist once per mode count, suffixed _all_stable / _symmetry_removed
PER_MODE = ("beta", "ci_lo", "ci_hi", "r2", "n_modes", "s", "mle_beta", "mle_se", "ci_unit")


def default_lengths(lmax, configured=None):
    """Table I lengths: the configured ones that fit in lmax (lmax itself added), else
    8, 16, … up to lmax (lmax itself included): the paper's L sweep for any store."""
    if configured:
        out = sorted({int(L) for L in configured if 1 <= int(L) <= lmax})
    else:
        out = [L for L in (2 ** k for k in range(3, 20)) if L <= lmax]
    return out + ([lmax] if not out or out[-1] != lmax else [])


@dataclass
class IRRow:
    """One Table I row: tokens t < L of one layer, both mode counts (see module docstring).

    sym_removed: modes the symmetry-removed count drops (scale + marginal classes);
    sym_stable: of those, the stable ones (0 < |ζ| < 1, counted by all-stable);
    sym_below / sym_inside: of the stable ones, λ below the window / inside it.
    """
    key: int                 # L (length sweep) or layer (depth sweep)
    L: int
    layer: int
    n_tokens: int
    beta_all_stable: float
    ci_lo_all_stable: float
    ci_hi_all_stable: float
    r2_all_stable: float
    n_modes_all_stable: int
    s_all_stable: float
    mle_beta_all_stable: float
    mle_se_all_stable: float
    ci_unit_all_stable: str          # what its bootstrap resampled (BootstrapIR.unit)
    beta_symmetry_removed: float
    ci_lo_symmetry_removed: float
    ci_hi_symmetry_removed: float
    r2_symmetry_removed: float
    n_modes_symmetry_removed: int
    s_symmetry_removed: float
    mle_beta_symmetry_removed: float
    mle_se_symmetry_removed: float
    ci_unit_symmetry_removed: str    # each count sets its own block length
    delta_beta: float        # β_all-stable − β_symmetry-removed
    sym_removed: int
    sym_stable: int
    sym_below: int
    sym_inside: int

    def get(self, name, modes=None):
        """A per-mode column by its bare name (`beta`, `ci_lo`, …) or any column."""
        return getattr(self, f"{name}_{mode_key(modes)}" if name in PER_MODE else name)


@dataclass
class IRTable:
    """Rows of fitted exponents, one per L or per layer (`by`); figures draw `modes`."""
    rows: list
    by: str = "L"
    window: tuple = WINDOW
    level: float = 0.9
    fits: dict = field(default_factory=dict, repr=False)   # modes -> {key: IRFit} (Fig 7)
    modes: str = DEFAULT_MODES

    def column(self, name, modes=None):
        return np.array([r.get(name, modes or self.modes) for r in self.rows], dtype=float)

    def to_dicts(self):
        return [asdict(r) for r in self.rows]

    def to_csv(self, path):
        with open(path, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(IRRow.__dataclass_fields__))
            w.writeheader()
            w.writerows(self.to_dicts())
        return path

    def to_markdown(self, reference=None) -> str:
        """Both counts side by side; `reference` {key: β} is the paper's (all-stable) value."""
        ref = reference or {}
        ci = f"{self.level:.0%} CI"
        head = (f"| {self.by} | β all-stable | {ci} | R² | modes in window | "
                f"β symmetry-removed | {ci} | R² | modes in window | Δβ | MLE β all-stable | "
                f"MLE β symmetry-removed |" + (" paper β |" if ref else ""))
        lines = [head, "|" + "---|" * (head.count("|") - 1)]
        for r in self.rows:
            cells = [str(r.key)]
            for m in MODES:
                cells += [f"{r.get('beta', m):+.3f}",
                          f"[{r.get('ci_lo', m):+.3f}, {r.get('ci_hi', m):+.3f}]",
                          f"{r.get('r2', m):.4f}", f"{r.get('n_modes', m):,}"]
            cells.append(f"{r.delta_beta:+.3f}")
            cells += [f"{r.get('mle_beta', m):+.3f} ± {r.get('mle_se', m):.3f}" for m in MODES]
            if ref:
                cells.append(f"{ref[r.key]:+.3f}" if r.key in ref else "–")
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def plot(self, ax=None, reference=None, label="this run", color="C0", xshift=1.0, marker="o",
             modes=None):
        """β of mode count `modes` (default the table's) with CI error bars; `xshift`
        multiplies the x positions (side-by-side models)."""
        ax = axes_or_new(ax)
        modes = check_modes(modes or self.modes)
        k, b = self.column("key") * xshift, self.column("beta", modes)
        err = np.abs(np.vstack([b - self.column("ci_lo", modes), self.column("ci_hi", modes) - b]))
        unit = self.rows[-1].get("ci_unit", modes) if self.rows else "tokens"
        ax.errorbar(k, b, yerr=err, fmt=marker + "-", color=color, capsize=3,
                    label=f"{label}, {modes} ({self.level:.0%} bootstrap CI over {unit})")
        if reference:
            rk = sorted(reference)
            ax.plot(rk, [reference[x] for x in rk], "s--", color="0.5", mfc="none",
                    label="paper (all stable modes)")
        ax.axhline(0, color="k", lw=0.6)
        if self.by == "L":
            ax.set_xscale("log", base=2)
            ax.set_xlabel("sequence length L (tokens)")
        else:
            ax.set_xlabel("layer")
        ax.set_ylabel(f"β [{modes}]  (N(<λ) ∝ λ^(1+β) on [{self.window[0]:g}, {self.window[1]:g}])")
        ax.legend(fontsize=8)
        return ax

    def plot_cumulative(self, ax=None, modes=None):
        """Fig 7: N(<λ) with the fitted lines of mode count `modes`, one colour per row."""
        ax = axes_or_new(ax)
        modes = check_modes(modes or self.modes)
        fits = self.fits.get(modes, {})
        for (key, fit), c in zip(fits.items(), sweep_colors(len(fits))):
            fit.plot(ax, color=c, label=f"{self.by} = {key}: β = {fit.beta:+.3f}")
        for v in self.window:
            ax.axvline(v, color="0.6", ls=":", lw=0.8)
        ax.set_ylabel(f"N(<λ)  ({modes} modes)")
        return ax


def symmetry_modes(sr, window) -> dict:
    """Where the modes the symmetry-removed count drops sit (`sr`: its ModeClasses)."""
    lo, hi = window
    lam = np.asarray(sr.removed)
    return {"sym_removed": int(sr.scale + sr.marginal), "sym_stable": int(lam.size),
            "sym_below": int((lam < lo).sum()), "sym_inside": int(((lam >= lo) & (lam <= hi)).sum())}


def bootstrap_from_agg(agg, layer, L, modes, window, n_boot, level, seed):
    """Percentile CI of β under `modes` from the per-token histograms of tokens t < L (done
    tokens only; L None: all), each tagged with its sequence so the resampling unit can
    respect token correlation. Returns (bootstrap result, (seq, L) done mask)."""
    done = agg.token_done(layer)[:, :L]                                      # (seq, L)
    units = agg.token_hist(layer, modes=modes)[:, :L][done].reshape(-1, N_COLS)
    seq = np.nonzero(done)[0]                                                # (units,)
    return bootstrap_ir_from_hists(units, window, n_boot=n_boot, level=level, seed=seed,
                                   seq=seq), done


def ir_row(store, agg, layer, L, window=WINDOW, n_boot=500, level=0.9, seed=0, key=None):
    """Fit, bootstrap CI and MLE of both mode counts for tokens t < L of one layer;
    returns (IRRow, {modes: IRFit})."""
    classes = block_classes(store, layer, L)
    vals, fits = {}, {}
    for m in MODES:
        rates = classes[m].stable
        fits[m] = fit = fit_ir_exponent(rates, window)
        mle = mle_ir_exponent(rates, window)
        boot, done = bootstrap_from_agg(agg, layer, L, m, window, n_boot, level, seed)
        k = mode_key(m)
        vals.update({f"beta_{k}": fit.beta, f"ci_lo_{k}": boot.lo, f"ci_hi_{k}": boot.hi,
                     f"r2_{k}": fit.r2, f"n_modes_{k}": fit.n_modes, f"s_{k}": fit.s,
                     f"mle_beta_{k}": mle.beta, f"mle_se_{k}": mle.se, f"ci_unit_{k}": boot.unit})
    row = IRRow(key=L if key is None else key, L=int(L), layer=int(layer), n_tokens=int(done.sum()),
                delta_beta=vals["beta_all_stable"] - vals["beta_symmetry_removed"],
                **symmetry_modes(classes["symmetry-removed"], window), **vals)
    return row, fits


def _table(rows_fits, by, window, level, modes):
    rows = [r for r, _ in rows_fits]
    fits = {m: {r.key: f[m] for r, f in rows_fits} for m in MODES}
    return IRTable(rows, by, tuple(window), level, fits, check_modes(modes))


def beta_vs_length(store, agg, layer, lengths=None, window=WINDOW, n_boot=500, level=0.9, seed=0,
                   modes=DEFAULT_MODES):
    """Table I for one layer: β(L) over prefix lengths L, both mode counts."""
    lengths = lengths or default_lengths(store.layer_length[layer])
    return _table([ir_row(store, agg, layer, L, window, n_boot, level, seed) for L in lengths],
                  "L", window, level, modes)


def beta_vs_depth(store, agg, L, layers=None, window=WINDOW, n_boot=500, level=0.9, seed=0,
                  modes=DEFAULT_MODES):
    """β at fixed L across the stored layers (layers shorter than L use their own length)."""
    layers = layers or store.layers
    return _table([ir_row(store, agg, ly, min(L, store.layer_length[ly]), window, n_boot, level,
                          seed, key=ly) for ly in layers], "layer", window, level, modes)
