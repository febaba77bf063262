"""report.md lines and the figure of a model against its nulls (studies/nulls.py)."""
from __future__ import annotations

import numpy as np

from analysis._plot import axes_or_new, window_lines
from analysis.spectrum.observables import tdos

FIGURE = "tdos_vs_nulls.png"


def _num(v, fmt="+.4g") -> str:
    return format(v, fmt) if np.isfinite(v) else "–"


def _est(e) -> str:
    return f"{_num(e.value)} [{_num(e.lo)}, {_num(e.hi)}]"


def null_markdown(study, heading="###") -> list:
    """The model's observables beside its nulls: values, z, rank, Δ with CI, p raw / Holm,
    verdict; then the nulls themselves, listed under their parent."""
    if study is None:
        return []
    kinds = ", ".join(f"`{n}` ({v['kind']}, seed {v['seed']})" for n, v in study.nulls.items())
    md = [f"{heading} Against its nulls (layer {study.layer}, L = {study.L})", "",
          f"Nulls of this model (the same architecture with weights that learned nothing): "
          f"{kinds}. They are read here, not as models of their own.", "",
          "| observable | trained [CI] | nulls (each) | z | rank | Δ = trained − mean null [CI] "
          "| p raw | p Holm | verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for c in study.comparisons:
        nulls = "; ".join(_num(v.value) for v in c.nulls.values())
        md.append(f"| {c.observable} | {_est(c.trained)} | {nulls} | {_num(c.z, '+.2f')} | "
                  f"above {c.rank} of {len(c.nulls)} | {_num(c.delta)} [{_num(c.lo)}, {_num(c.hi)}] | "
                  f"{_num(c.p_raw, '.2g')} | {_num(c.p_adjusted, '.2g')} | **{c.verdict}** |")
    units = sorted({c.trained.unit for c in study.comparisons})
    md += ["", f"Δ's interval carries both sides: the trained value's own bootstrap interval "
           f"(resampling {', '.join(units)}) and the spread of a fresh null draw (the nulls' "
           f"variance across seeds, at least their own sampling variance), Student's t with "
           f"k − 1 degrees of freedom for k nulls (docs/analysis.md, \"Reading a result against "
           f"its null\"). z = (trained − mean) / sd of the nulls; the p are read from the "
           f"interval and adjusted over the report's family (Holm).", ""]
    return md


def figure(agg_of, st, layer, L, modes, window, title):
    """The trained TDOS over the band (min … max per bin) of its nulls' TDOS."""
    ax = axes_or_new()
    dens = []
    for n in st.nulls:
        sp = tdos(agg_of(n), layer, L, modes=modes)
        dens.append(sp.density)
        centers = sp.centers
    if dens:
        d = np.array(dens)                                              # (k, N_BINS)
        lo, hi = d.min(0), d.max(0)
        ok = hi > 0
        ax.fill_between(centers[ok], np.maximum(lo[ok], hi[ok] * 1e-3), hi[ok], color="0.75",
                        label=f"nulls' band ({len(dens)} nulls, min … max per bin)")
    tdos(agg_of(st.name), layer, L, modes=modes).plot(ax, color="C0", label=f"{st.name} (trained)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    window_lines(ax, window)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return ax.figure
