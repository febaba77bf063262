"""Confidence interval of the infrared exponent β from a bootstrap over correlated tokens.

The statistic is the grid fit of `fits.py` (slope of log N(<λ) at the global edges in the
window). N(<λ_j) is a sum over tokens of each token's count below λ_j, so a replicate is a
weighted sum of per-token count vectors and only the resampling plan (`resampling.py`:
a jackknife over sequences, circular blocks of k tokens within a single one, or single
tokens) decides the weights. The
raw-rate path and the aggregate path (per-token histograms, as `tdos analyze` uses) build
the same per-token count vectors and so give the same interval, bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis._plot import axes_or_new
from analysis.fit.fits import WINDOW, IRFit, positive_sorted, fit_ir_exponent, fit_ir_from_hist
from analysis.fit.resampling import (Resampling, group_by_sequence, log_slope_influence,
                                     resampling_for)
from analysis.spectrum.rates import EDGES, grid_indices


@dataclass
class BootstrapIR:
    """Bootstrap CI of β: what was resampled, how, at which level, over which window."""
    fit: IRFit                 # the point fit on all tokens
    lo: float
    hi: float
    level: float               # e.g. 0.9 for a 90 % interval
    n_boot: int                # replicates (the jackknife's: S)
    window: tuple              # fit window (lo, hi) in λ
    unit: str                  # "jackknife over S sequences, t(S−1)" | "sequences" |
                               # "circular blocks of k tokens" | "single tokens (i.i.d.)"
    block_length: int          # tokens per block (1: single tokens, 0: whole sequences)
    n_units: float             # independent units the spread is learned from
    n_tokens: int
    n_seqs: int
    rule: str                  # how the unit was chosen, in words
    betas: np.ndarray = field(repr=False)               # (n_boot,) replicate β
    resampling: Resampling = field(repr=False, default=None)

    @property
    def beta(self):
        return self.fit.beta

    @property
    def se(self):
        return self.resampling.se(self.betas) if self.resampling is not None \
            else float(np.nanstd(self.betas))

    @property
    def dof(self) -> float:
        return float(self.resampling.dof) if self.resampling is not None else np.inf

    @property
    def stretch(self) -> float:
        """Factor applied to each side of the percentile interval (see Resampling.interval)."""
        return 1.0 if self.resampling is None else self.resampling.stretch(self.level)

    @property
    def method(self) -> str:
        """The interval's recipe in words (report, fits.json)."""
        if self.resampling is not None and self.resampling.jackknife:
            return (f"{self.level:.0%} CI of β, β ± t({self.n_seqs - 1})·se from a jackknife over "
                    f"{self.n_seqs} sequences ({self.n_tokens} tokens), each left out once; "
                    f"window [{self.window[0]:g}, {self.window[1]:g}]")
        return (f"{self.level:.0%} percentile bootstrap CI of β, {self.n_boot} replicates "
                f"resampling {self.unit} of {self.n_tokens} tokens in {self.n_seqs} sequence(s) "
                f"({self.rule}); stretched ×{self.stretch:.3f} for the replicates' variance "
                f"bias and Student's t with {self.dof:.1f} effective degrees of freedom; window "
                f"[{self.window[0]:g}, {self.window[1]:g}]")

    def covers(self, beta):
        return bool(self.lo <= beta <= self.hi)

    def plot(self, ax=None):
        ax = axes_or_new(ax)
        ax.hist(self.betas[np.isfinite(self.betas)], bins=40, color="0.6")
        for v, ls in ((self.lo, "--"), (self.hi, "--"), (self.beta, "-")):
            ax.axvline(v, color="C3", ls=ls)
        ax.set_xlabel("β (bootstrap replicates)")
        ax.set_ylabel("replicates")
        ax.set_title(f"{self.level:.0%} CI [{self.lo:+.3f}, {self.hi:+.3f}], {self.unit}", fontsize=9)
        return ax


def bootstrap_ir_exponent(rates_by_token, window=WINDOW, n_boot=1000, level=0.9, seed=0, seq=None,
                          unit="auto", block_length=None) -> BootstrapIR:
    """CI of β from per-token rates `rates_by_token` (token order), `seq` the sequence id of
    each entry (None: one sequence). unit: "auto" (see resampling.py), "sequences",
    "blocks" or "tokens" (the i.i.d. comparison); block_length forces k."""
    order, s = group_by_sequence(seq, len(rates_by_token))
    tokens = [positive_sorted(rates_by_token[i]) for i in order]
    x = EDGES[grid_indices(window)]
    cum = np.stack([np.searchsorted(r, x, "left") for r in tokens])   # (N, n_pts) N(<x_j) per token
    fit = fit_ir_exponent(np.concatenate(tokens) if tokens else np.zeros(0), window)
    return _bootstrap(cum, x, s, fit, window, n_boot, level, seed, unit, block_length)


def bootstrap_ir_from_hists(token_hists, window=WINDOW, n_boot=1000, level=0.9, seed=0, seq=None,
                            unit="auto", block_length=None) -> BootstrapIR:
    """Same as `bootstrap_ir_exponent` from (N, col) global-bin histograms of single tokens
    in token order (the aggregate's per-token rows), `seq` (N,) their sequence ids."""
    h = np.asarray(token_hists, np.int64)
    order, s = group_by_sequence(seq, len(h))
    idx = grid_indices(window)
    hs = h if (order == np.arange(len(h))).all() else h[order]
    # N(<EDGES[k]) = columns 0..k summed (column 0: below the first edge); only k in idx needed
    cum = np.cumsum(hs[:, idx[0]:idx[-1] + 1], axis=1)[:, idx - idx[0]] \
        + hs[:, :idx[0]].sum(1, keepdims=True)                          # (N, n_pts)
    fit = fit_ir_from_hist(h.sum(0), window)
    return _bootstrap(cum, EDGES[idx], s, fit, window, n_boot, level, seed, unit, block_length)


def _bootstrap(cum, x, seq, fit, window, n_boot, level, seed, unit, block_length):
    logx = np.log10(x)
    plan = resampling_for(log_slope_influence(cum, logx), seq, unit, block_length)
    betas = _slopes(logx, plan.replicate_sums(cum, n_boot, seed)) - 1   # (n_boot,)
    lo, hi = plan.interval(fit.beta, betas, level)
    return BootstrapIR(fit=fit, lo=lo, hi=hi, level=level, n_boot=len(betas), window=tuple(window),
                       unit=plan.unit, block_length=plan.block_length, n_units=plan.n_units,
                       n_tokens=plan.n_tokens, n_seqs=plan.n_seqs, rule=plan.rule, betas=betas,
                       resampling=plan)


def _slopes(logx, n_cum):
    """Row-wise least-squares slopes of log10 n_cum on logx, skipping zero counts."""
    w = (n_cum > 0).astype(np.float64)
    y = np.log10(np.where(n_cum > 0, n_cum, 1.0))
    sw = w.sum(1)
    mx = (w * logx).sum(1) / np.maximum(sw, 1)
    my = (w * y).sum(1) / np.maximum(sw, 1)
    dx = logx - mx[:, None]
    sxx = (w * dx * dx).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(sw >= 3, (w * dx * (y - my[:, None])).sum(1) / sxx, np.nan)
