"""compare.md, compare.json and the figures of a `Comparison` (compare.py)."""
from __future__ import annotations

import numpy as np

from analysis._format import ci, estimator_words, format_p
from analysis.report import figures as F
from analysis.report.depth import comparison_figure as depth_figure
from analysis.report.depth import comparison_markdown as depth_markdown
from analysis.report.fits_json import PATHS, json_text, portable
from analysis.report.memory import comparison_figure as memory_figure
from analysis.report.memory import comparison_markdown as memory_markdown
from analysis.report.outputs import Outputs
from analysis.report.text import FIGURE_CAPTIONS
from sweep.format.settings import MODES

FIGURES = ("compare_beta.png", "compare_delta.png", "compare_tdos.png", "compare_kernel.png")


def verdict_lines(c) -> list:
    """One sentence per pair at the shared L (the primary estimator, Holm-corrected), then each
    model's primary β minus its own nulls'."""
    out = [f"- {c.primary.describe()}"] if c.primary else []
    if c.beta_word != "Δβ":
        out.append("- the power law is rejected over the window (GOF p: " + ", ".join(
            f"{n} {p:.3g}" for n, p in c.gof_p.items()) + "): every β test is a **window-slope "
            "test**; the window mode density below needs no law")
    for d in c.primary_deltas:
        if d.L != c.sides[0].L:
            continue
        m = d.p_method
        out.append(f"- {d.a} (layer {d.layer_a}) − {d.b} (layer {d.layer_b}), L = {d.L}: {c.beta_word} = "
                   f"{d.delta:+.3f} {ci(*d.ci)}, p raw {format_p(d.p_raw, m)}, p Holm "
                   f"{format_p(d.p_adjusted, m)} ({m}) → **{d.verdict}**")
    for d in c.density_deltas:
        out.append(f"- window mode density ({d.modes} modes per token in the window), {d.a} − "
                   f"{d.b}, L = {d.L}: Δ = {d.delta:+.3g} {ci(d.lo, d.hi)} "
                   f"({' / '.join(sorted(set(d.units)))}), p Holm "
                   f"{format_p(d.p_adjusted, d.p_method)} ({d.p_method}) → **{d.verdict}**")
    for name, ns in c.nulls.items():
        for x in ns.comparisons:
            if x.key == "beta":
                out.append(f"- {name} − its {len(x.nulls)} {x.kind} nulls ({x.sequences} seq, "
                           f"{x.trained.positions}): Δβ = {x.delta:+.3f} {ci(x.lo, x.hi)}, p Holm "
                           f"{format_p(x.p_adjusted, x.p_method)} ({x.p_method}) → **{x.verdict}**")
    return out


def beta_table(c, modes) -> list:
    """β with CI of every model against L at its representative layer."""
    Ls = list(c.sides[0].by_length[modes])
    head = "| L | " + " | ".join(f"{s.name} (layer {s.layer})" for s in c.sides) + " |"
    lines = [head, "|" + "---|" * (len(c.sides) + 1)]
    for L in Ls:
        cells = []
        for s in c.sides:
            b = s.by_length[modes][L]
            cells.append(f"{b.beta:+.3f} {ci(b.lo, b.hi)}" if np.isfinite(b.beta) else "no modes")
        lines.append(f"| {L} | " + " | ".join(cells) + " |")
    return lines


def delta_table(c) -> list:
    """Every Δβ: pair, count, where (L or matched layers), value, CI, its CI alone's verdict."""
    lines = ["| pair | count | along | L | layers | Δβ | CI | CI alone (uncorrected) |",
             "|---|---|---|---|---|---|---|---|"]
    for d in c.deltas:
        lines.append(f"| {d.a} − {d.b} | {d.modes} | {d.along} | {d.L} | {d.layer_a} / {d.layer_b} | "
                     f"{d.delta:+.3f} | {ci(d.lo, d.hi)} | {d.verdict} |")
    return lines


def comparison_markdown(c, heading_level=2, rel="") -> list:
    h = "#" * heading_level
    s = c.settings
    units = sorted({u for d in c.deltas for u in d.units})
    md = [f"{h} Do the models' β differ?", "",
          "Models: " + "; ".join(f"{x.label} ({x.arch}, {x.n_layers} layers, representative "
                                   f"layer {x.layer})" for x in c.sides) + ".", "",
          *verdict_lines(c), "",
          f"Settings: {s.describe()}.", "",
          f"The verdicts: Δβ = β_a − β_b of the primary estimator"
          f"{f' ({estimator_words(c.primary)})' if c.primary else ''}, each side's {s.level:.0%} "
          f"interval read as a standard error with its own degrees of freedom (Welch); \"differ\" "
          f"only where the Holm-corrected p is below {1 - s.level:.2g}, \"no difference shown\" "
          f"otherwise. The diagnostic Δβ tables below use the cumulative fit under both counts, "
          f"each CI from the models' own replicates drawn independently (units: "
          f"{', '.join(units)}). Models fed the same text are correlated through it, which "
          f"independent draws ignore: the intervals are then conservative. Two checkpoints that "
          f"differ in training data or size as well as architecture are compared as checkpoints: "
          f"their Δ is not an architecture contrast.", "",
          *([c.family.describe(), "", *c.family.table(), ""] if c.family else []),
          "The tables below are **diagnostics** (the cumulative fit under both counts, each "
          "interval alone, uncorrected).", "",
          *[f"- {x.label}: the all-stable count leaves out stable modes below λ = "
            f"{x.floor[0]:.3g} ({x.floor[1]})." for x in c.sides if x.floor[1]], ""]
    for m in MODES:
        md += [f"{h}# β against L [{m}]", "", *beta_table(c, m), ""]
    md += [f"{h}# Every Δβ (against L at the representative layers, then against relative depth "
           f"at L = {c.sides[0].L})", "", *delta_table(c), ""]
    figures = list(FIGURES)
    if c.depth:
        md += depth_markdown(c.depth, c.depth_deltas, h + "#")
        figures.append("compare_depth.png")
    if c.memory:
        md += memory_markdown(c.memory, c.memory_layers, c.memory_deltas, h + "#")
        figures.append("compare_memory.png")
    for f in figures:
        md += [f"**{f}** — {FIGURE_CAPTIONS.get(f, '')}", "", f"![{f}]({rel}{f})", ""]
    return md


def comparison_figures(c) -> list:
    """[(file name, Figure)] of a comparison, drawn from its own numbers and spectra."""
    sp = c.spectra
    figs = [("compare_beta.png", F.fig_compare_beta(c)), ("compare_delta.png", F.fig_compare_delta(c)),
            ("compare_tdos.png", F.fig_compare_tdos(sp.panels, sp.depths, sp.window,
                                                   f"ρ_block at L = {sp.L}, matched relative "
                                                   f"depth [{sp.modes} modes]")),
            ("compare_kernel.png", F.fig_compare_kernel(sp.kernels, sp.window,
                                                       f"K(t) at L = {sp.L} [{sp.modes} modes]"))]
    if c.depth:
        figs.append(("compare_depth.png", depth_figure(c.depth)))
    if c.memory:
        figs.append(("compare_memory.png", memory_figure(c.memory, c.memory_layers)))
    return figs


def add_comparison(c, outputs: Outputs, markdown=True) -> None:
    """A comparison's figures, compare.json (paths relative, fits_json.portable) and
    (markdown=True) compare.md, each written once through `outputs`."""
    for name, fig in comparison_figures(c):
        outputs.add(name, fig)
    base = c.sides[0].store              # every path but a store's relative to the first store
    doc = {**c.to_dict(), "paths": PATHS.replace("the store", f"the store of {c.sides[0].label}")}
    outputs.add("compare.json", json_text(portable(doc, base, outputs.out)))
    if markdown:
        outputs.add("compare.md", "\n".join(comparison_markdown(c, 1)) + "\n")


def write_comparison(c, out, markdown=True) -> list:
    """Write compare.json, the figures and (markdown=True) compare.md into `out`; return
    the file names."""
    outputs = Outputs(out)
    add_comparison(c, outputs, markdown)
    return outputs.written
