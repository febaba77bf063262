"""report.md lines and the figure of a model against its nulls (studies/nulls.py)."""
from __future__ import annotations

import textwrap

import numpy as np

from analysis._format import format_p, num
from analysis._plot import axes_or_new, interval_bars, new_figure, window_lines

FIGURE = "tdos_vs_nulls.png"
DEPTH_FIGURE = "nulls_across_depth.png"


def _est(e) -> str:
    return f"{num(e.value, '+.4g')} [{num(e.lo, '+.4g')}, {num(e.hi, '+.4g')}]"


def null_markdown(study, heading="###") -> list:
    """The model's observables beside its nulls, one block of rows per null kind: values, z,
    rank, Δ with CI, p raw / Holm with the distribution they came from, verdict; then what
    each design (k nulls of one kind) can show in the family it was counted in."""
    if study is None:
        return []
    kinds = "; ".join(f"{kind}: " + ", ".join(f"`{n}`" for n in v["nulls"])
                      for kind, v in study.kinds.items())
    tokens = "; ".join(f"{kind}: {v['sequences']} of the model's {v['of_sequences']} sequences, "
                       f"L = {v['L']}" + ("" if v["same_tokens"] else " (**tokens differ**)")
                       for kind, v in study.kinds.items())
    md = [f"{heading} Against its nulls, one kind at a time (layer {study.layer})", "",
          f"Nulls of this model (the same architecture with weights that learned nothing): "
          f"{kinds}. They are read here, not as models of their own, and the kinds are never "
          f"pooled. The trained value of each row is computed on exactly its nulls' tokens "
          f"({tokens}); the column \"tokens\" says which positions each row read.", "",
          "| observable | kind | tokens | trained [CI] | nulls (each) | z | rank (p) | "
          "Δ = trained − mean null [CI] | p raw | p Holm | p from | verdict |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in study.comparisons:
        nulls = "; ".join(num(v.value, '+.4g') for v in c.nulls.values())
        md.append(f"| {c.observable} | {c.kind} | {c.sequences} seq, {c.trained.positions} | "
                  f"{_est(c.trained)} | {nulls} | {num(c.z, '+.2f')} | above {c.rank} of "
                  f"{len(c.nulls)} ({num(c.p_rank, '.2g')}) | {num(c.delta, '+.4g')} [{num(c.lo, '+.4g')}, "
                  f"{num(c.hi, '+.4g')}] | {format_p(c.p_raw, c.p_method)} | "
                  f"{format_p(c.p_adjusted, c.p_method)} | {c.p_method} | **{c.verdict}** |")
    units = sorted({c.trained.unit for c in study.comparisons})
    md += ["", f"Δ's interval carries both sides: the trained value's own interval "
           f"(resampling {', '.join(units)}) and the spread of a fresh null draw of that kind "
           f"(the nulls' variance across seeds, at least their own sampling variance), Student's "
           f"t with k − 1 degrees of freedom for k nulls; its p is read from the same t (column "
           f"\"p from\"), so p < 1 − level exactly when the interval excludes 0 "
           f"(docs/analysis.md, \"Reading a result against its null\"). z = (trained − mean) / "
           f"sd of the nulls; rank (p): the two-sided rank test's p. p adjusted over the "
           f"report's family (Holm). \"No difference shown\" is not \"the same\": it is "
           f"what k nulls could not tell apart.", ""]
    if study.comparisons:
        level = study.comparisons[0].level
        md += [f"What each design can show, in the family of {study.family_m} tests:", "",
               *(f"- {kind}: {line}" for kind, line in study.designs(level).items()), ""]
    return md


def figure(bands, name, title):
    """The trained TDOS over the band (min … max per bin) of each kind's nulls' TDOS, the
    trained curve on exactly the nulls' sequences (`bands`: measure/figures.NullBands)."""
    ax = axes_or_new()
    for i, (kind, dens) in enumerate(bands.kinds.items()):
        if not dens:
            continue
        d = np.array([sp.density for sp in dens])                        # (k, N_BINS)
        lo, hi, centers = d.min(0), d.max(0), dens[0].centers
        ok = hi > 0
        ax.fill_between(centers[ok], np.maximum(lo[ok], hi[ok] * 1e-3), hi[ok], color=f"C{i + 1}",
                        alpha=0.3, label=f"{kind}: band of {len(dens)} nulls (min … max per bin)")
    for j, (S, Ls, sp) in enumerate(bands.trained):
        what = "" if S is None else f", {S} seq × t < {Ls}"
        sp.plot(ax, color=("C0", "k", "C9")[j % 3], label=f"{name} (trained{what})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    window_lines(ax, bands.window)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return ax.figure


def depth_null_markdown(study, heading="###") -> list:
    """The across-depth family (studies/nulls_depth.py): one row per (layer, observable, kind)."""
    if study is None:
        return []
    md = [f"{heading} Against its nulls across depth (layers {', '.join(map(str, study.layers))})", "",
          f"{study.family.describe()} Each row: the trained value on its nulls' tokens, the "
          f"nulls' values, Δ with its t(k − 1) interval and p, as in the table above; the "
          f"representative layer's family is separate.", "",
          "| layer | observable | kind | tokens | trained [CI] | nulls (each) | Δ [CI] | p raw | "
          "p Holm | verdict |", "|---|---|---|---|---|---|---|---|---|---|"]
    for layer, c in study.rows:
        nulls = "; ".join(num(v.value, '+.4g') for v in c.nulls.values())
        md.append(f"| {layer} | {c.observable} | {c.kind} | {c.sequences} seq, {c.trained.positions} "
                  f"| {_est(c.trained)} | {nulls} | {num(c.delta, '+.4g')} [{num(c.lo, '+.4g')}, {num(c.hi, '+.4g')}] | "
                  f"{format_p(c.p_raw, c.p_method)} | {format_p(c.p_adjusted, c.p_method)} | "
                  f"**{c.verdict}** |")
    return md + [""]


def depth_figure(study, title):
    """One panel per observable: the trained value with its interval at every layer (on the
    nulls' tokens) and each kind's nulls, one point per null."""
    names = list(dict.fromkeys(c.observable for _, c in study.rows))
    fig = new_figure(5.0 * len(names), 4.0)
    for ax, name in zip(fig.subplots(1, len(names), squeeze=False)[0], names):
        rows = [(ly, c) for ly, c in study.rows if c.observable == name]
        for i, kind in enumerate(dict.fromkeys(c.kind for _, c in rows)):
            of = [(ly, c) for ly, c in rows if c.kind == kind]
            x = np.array([ly for ly, _ in of], float)
            for j, (ly, c) in enumerate(of):
                ax.plot(np.full(len(c.nulls), ly + 0.15 * (i + 1)), c.null_values, "o", ms=3,
                        color=f"C{i + 1}", label=f"{kind} nulls ({len(c.nulls)} per layer)" if j == 0 else None)
            if i == 0:
                interval_bars(ax, x, [c.trained.value for _, c in of], [c.trained.lo for _, c in of],
                              [c.trained.hi for _, c in of], color="k", fmt="s-", ms=4, capsize=3,
                              label=f"trained ({of[0][1].sequences} seq, {of[0][1].trained.positions})")
        ax.set_xlabel("layer")
        ax.set_ylabel(textwrap.fill(name, 45), fontsize=8)
        ax.set_xticks(study.layers)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    return fig
