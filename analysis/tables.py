"""β across sequence length and depth: Table I and Figs 7–8.

The point fit and n_modes use the raw rates from the store (n_modes is the exact count in
[lo, hi]); the bootstrap CI resamples whole tokens (one eig(J_tt) = one unit) from the
per-token histograms of the aggregate, which give the same N(<λ) on the grid exactly.
"""
from __future__ import annotations

import csv
from dataclasses import asdict, dataclass, field

import numpy as np

from ._plot import axes_or_new, sweep_colors
from .fits import WINDOW, bootstrap_ir_from_hists, fit_ir_exponent, mle_ir_exponent
from .observables import block_rates
from .rates import N_COLS

# Paper Table I (layer 24, Mamba-370M): L -> β
PAPER_BETA = {8: -0.228, 16: -0.198, 32: -0.182, 64: -0.170, 128: -0.165, 256: -0.169, 512: -0.168}
PAPER_MODES = {8: 2719, 512: 156593}


def default_lengths(lmax):
    """8, 16, … up to lmax (lmax itself included): the paper's L sweep for any store."""
    out = [L for L in (2 ** k for k in range(3, 20)) if L <= lmax]
    return out + ([lmax] if not out or out[-1] != lmax else [])


@dataclass
class IRRow:
    key: int                 # L (length sweep) or layer (depth sweep)
    L: int
    layer: int
    s: float
    beta: float
    ci_lo: float
    ci_hi: float
    r2: float
    n_modes: int
    mle_beta: float
    mle_se: float
    n_tokens: int


@dataclass
class IRTable:
    """Rows of fitted exponents, one per L or per layer (`by`)."""
    rows: list
    by: str = "L"
    window: tuple = WINDOW
    level: float = 0.9
    fits: dict = field(default_factory=dict, repr=False)   # key -> IRFit (for Fig 7)

    def column(self, name):
        return np.array([getattr(r, name) for r in self.rows], dtype=float)

    def to_dicts(self):
        return [asdict(r) for r in self.rows]

    def to_csv(self, path):
        with open(path, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(asdict(self.rows[0])))
            w.writeheader()
            w.writerows(self.to_dicts())
        return path

    def to_markdown(self, reference=None) -> str:
        ref = reference or {}
        head = (f"| {self.by} | s | β | {self.level:.0%} CI | R² | modes in window | MLE β |"
                + (" paper β |" if ref else ""))
        lines = [head, "|" + "---|" * (head.count("|") - 1)]
        for r in self.rows:
            paper = ref.get(r.key)
            lines.append(
                f"| {r.key} | {r.s:.3f} | {r.beta:+.3f} | [{r.ci_lo:+.3f}, {r.ci_hi:+.3f}] | "
                f"{r.r2:.4f} | {r.n_modes:,} | {r.mle_beta:+.3f} ± {r.mle_se:.3f} |"
                + (f" {paper:+.3f} |" if paper is not None else (" – |" if ref else "")))
        return "\n".join(lines)

    def plot(self, ax=None, reference=None, label="this run", color="C0", xshift=1.0, marker="o"):
        """β with CI error bars; `xshift` multiplies the x positions (side-by-side models)."""
        ax = axes_or_new(ax)
        k, b = self.column("key") * xshift, self.column("beta")
        err = np.abs(np.vstack([b - self.column("ci_lo"), self.column("ci_hi") - b]))
        ax.errorbar(k, b, yerr=err, fmt=marker + "-", color=color, capsize=3,
                    label=f"{label} ({self.level:.0%} block-bootstrap CI)")
        if reference:
            rk = sorted(reference)
            ax.plot(rk, [reference[x] for x in rk], "s--", color="0.5", mfc="none",
                    label="paper (Mamba-370M, layer 24)")
        ax.axhline(0, color="k", lw=0.6)
        if self.by == "L":
            ax.set_xscale("log", base=2)
            ax.set_xlabel("sequence length L (tokens)")
        else:
            ax.set_xlabel("layer")
        ax.set_ylabel(f"β  (N(<λ) ∝ λ^(1+β) on [{self.window[0]:g}, {self.window[1]:g}])")
        ax.legend(fontsize=8)
        return ax

    def plot_cumulative(self, ax=None):
        """Fig 7: N(<λ) with the fitted lines, one colour per row."""
        ax = axes_or_new(ax)
        for (key, fit), c in zip(self.fits.items(), sweep_colors(len(self.fits))):
            fit.plot(ax, color=c, label=f"{self.by} = {key}: β = {fit.beta:+.3f}")
        for v in self.window:
            ax.axvline(v, color="0.6", ls=":", lw=0.8)
        return ax


def ir_row(store, agg, layer, L, window=WINDOW, n_boot=500, level=0.9, seed=0, key=None):
    """Fit, bootstrap CI (token units) and MLE for tokens t < L of one layer."""
    rates = block_rates(store, layer, L).stable
    fit = fit_ir_exponent(rates, window)
    mle = mle_ir_exponent(rates, window)
    done = agg.token_done(layer)[:, :L]
    units = agg.token_hist(layer)[:, :L][done].reshape(-1, N_COLS)
    boot = bootstrap_ir_from_hists(units, window, n_boot=n_boot, level=level, seed=seed)
    row = IRRow(key=L if key is None else key, L=int(L), layer=int(layer), s=fit.s,
                beta=fit.beta, ci_lo=boot.lo, ci_hi=boot.hi, r2=fit.r2, n_modes=fit.n_modes,
                mle_beta=mle.beta, mle_se=mle.se, n_tokens=int(done.sum()))
    return row, fit


def beta_vs_length(store, agg, layer, lengths=None, window=WINDOW, n_boot=500, level=0.9, seed=0):
    """Table I for one layer: β(L) over prefix lengths L."""
    lengths = lengths or default_lengths(store.layer_length[layer])
    rows, fits = [], {}
    for L in lengths:
        row, fits[L] = ir_row(store, agg, layer, L, window, n_boot, level, seed)
        rows.append(row)
    return IRTable(rows, "L", tuple(window), level, fits)


def beta_vs_depth(store, agg, L, layers=None, window=WINDOW, n_boot=500, level=0.9, seed=0):
    """β at fixed L across the stored layers (layers shorter than L use their own length)."""
    layers = layers or store.layers
    rows, fits = [], {}
    for layer in layers:
        row, fits[layer] = ir_row(store, agg, layer, min(L, store.layer_length[layer]), window,
                                  n_boot, level, seed, key=layer)
        rows.append(row)
    return IRTable(rows, "layer", tuple(window), level, fits)
