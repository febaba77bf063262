"""Figure helpers that never touch pyplot's global state (Agg canvas on a bare Figure)."""
from __future__ import annotations

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def new_figure(w=6.0, h=4.0, **kw) -> Figure:
    kw.setdefault("layout", "constrained")
    fig = Figure(figsize=(w, h), **kw)
    FigureCanvasAgg(fig)
    return fig


def axes_or_new(ax=None):
    return ax if ax is not None else new_figure().add_subplot()


def sweep_colors(n):
    """Viridis colours for an ordered sweep (sequence length, depth)."""
    return colormaps["viridis"](np.linspace(0.0, 0.9, max(n, 1)))


def panel_label(ax, letter):
    ax.set_title(f"({letter})", loc="left", fontweight="bold", fontsize=10)


def window_lines(ax, window):
    """The fit window's two edges as dotted verticals."""
    for v in window:
        ax.axvline(v, color="0.6", ls=":", lw=0.8)


def interval_bars(ax, x, value, lo, hi, **kw):
    """Points at `value` with asymmetric bars to [lo, hi]; points with a non-finite end are
    left out (a span or layer where nothing was fitted draws nothing)."""
    x, v, lo, hi = (np.asarray(a, float) for a in (x, value, lo, hi))
    ok = np.isfinite(v) & np.isfinite(lo) & np.isfinite(hi)
    kw.setdefault("capsize", 3)
    return ax.errorbar(x[ok], v[ok], yerr=[v[ok] - lo[ok], hi[ok] - v[ok]], **kw)


def save(fig, path, dpi=120):
    fig.savefig(path, dpi=dpi)
    return path
