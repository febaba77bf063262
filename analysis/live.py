"""A cheap progress figure for a running sweep: growing TDOS per layer and the current β.

Only blocks new since the last call are read (the incremental aggregate), and β comes from
the aggregated histograms (`fit_ir_from_hist`), which equals the raw-rate grid fit exactly.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ._plot import new_figure, save, sweep_colors
from .aggregate import aggregate
from .fits import WINDOW, fit_ir_from_hist
from .observables import Spectrum
from .store import open_store


def render_live(store_path, out_png, window=WINDOW) -> Path:
    """Update the aggregate and write `out_png`; returns its path."""
    agg = aggregate(store_path)
    st = open_store(store_path)
    fig = new_figure(12, 4.2 * len(st.models))
    axes = np.atleast_2d(fig.subplots(len(st.models), 2, squeeze=False))
    for (ax_rho, ax_beta), name in zip(axes, st.models):
        _model_panels(ax_rho, ax_beta, st.model(name), agg.model(name), window)
    fig.suptitle(f"{Path(store_path).name} — live at {time.strftime('%H:%M:%S')}")
    return Path(save(fig, Path(out_png), dpi=90))


def _model_panels(ax_rho, ax_beta, st, agg, window):
    counts = st.block_counts()
    betas, errs = [], []
    for layer, c in zip(st.layers, sweep_colors(len(st.layers))):
        h = agg.hist(layer)
        fit = fit_ir_from_hist(h, window)
        betas.append(fit.beta)
        errs.append(fit.stderr)
        if h.sum():
            Spectrum(h).plot(ax_rho, color=c, label=f"layer {layer}: β = {fit.beta:+.3f}")
    for v in window:
        ax_rho.axvline(v, color="0.6", ls=":", lw=0.8)
    ax_rho.set_ylabel("ρ_block(λ)")
    ax_rho.set_title(f"{st.name}: {counts['done']}/{counts['planned']} blocks done, "
                     f"{counts['flagged']} flagged")
    if ax_rho.get_legend_handles_labels()[0]:
        ax_rho.legend(fontsize=7, ncol=2 if len(st.layers) > 8 else 1)
    ax_beta.errorbar(st.layers, betas, yerr=errs, fmt="o-", capsize=2)
    ax_beta.axhline(0, color="k", lw=0.6)
    ax_beta.set_xlabel("layer")
    ax_beta.set_ylabel("current β (grid fit, ± regression s.e.)")
    done = agg.ledger() == 1
    ax_beta.set_title("blocks aggregated per layer: " + ", ".join(
        f"{l}:{int(done[i].sum())}" for i, l in enumerate(st.layers[:12])), fontsize=8)
