"""The token-memory section of `tdos analyze` and `tdos compare`: fits per layer, one
figure, markdown, and the comparison of models (analysis/studies/memory.py computes the numbers: MemoryStudy, compare_memory)."""
from __future__ import annotations

import numpy as np

from analysis._plot import interval_bars, new_figure, panel_label, sweep_colors
from analysis.report.text import FIGURE_CAPTIONS
from analysis.studies.memory import MemoryStudy

FIGURE = "memory.png"
CAPTION = FIGURE_CAPTIONS[FIGURE]



def figure(m: MemoryStudy, title: str):
    fig = new_figure(12, 8)
    ax = fig.subplots(2, 2).ravel()
    layers = list(m.fits)
    for c, ly in zip(sweep_colors(len(layers)), layers):
        m.fits[ly].profile.plot(ax[0], "loglog", color=c)
        m.fits[ly].profile.plot(ax[1], "linlog", color=c)
    ax[0].legend(fontsize=7, ncol=2)
    for a, what, label in ((ax[2], "alpha", "power-law exponent α"), (ax[3], "xi", "memory length ξ (tokens)")):
        interval_bars(a, layers, *([getattr(m.fits[ly], what + end) for ly in layers]
                                   for end in ("", "_lo", "_hi")), fmt="o-")
        for ly in layers:
            f = m.fits[ly]
            if f.preferred == ("power law" if what == "alpha" else "exponential") and np.isfinite(getattr(f, what)):
                a.plot([ly], [getattr(f, what)], "s", mfc="none", ms=11, color="C3")
        a.set_xticks(layers)
        a.set_xlabel("layer (□: the law preferred there)")
        a.set_ylabel(label)
    for a, letter in zip(ax, "abcd"):
        panel_label(a, letter)
    fig.suptitle(title)
    return fig


def _ci(lo, hi) -> str:
    return f"[{lo:.3g}, {hi:.3g}]" if np.isfinite(lo) and np.isfinite(hi) else "–"


def markdown(m: MemoryStudy) -> list:
    meta = m.meta
    first = next(iter(m.fits.values()))
    md = [f"### Token memory ({meta['estimator']}, lags 0..{meta['lags']}, output tokens "
          f"t = 0, {meta['every']}, {2 * meta['every']}, …)", "",
          f"m(k) = ⟨‖J_{{t,t−k}}‖_F² / ‖J_tt‖_F²⟩ over the sampled tokens t ≥ k; each layer fitted "
          f"over lags {first.window[0]}..{first.window[1]} by {first.method}. χ² p-values are "
          f"indicative (neighbouring lags are correlated). {first.level:.0%} CIs resampling "
          f"{first.unit}.", "",
          "| layer | kind | m(1) | m(K) | preferred | replicates agreeing | ξ (tokens) | α | "
          "χ² exp / power (dof) |", "|---|---|---|---|---|---|---|---|---|"]
    for ly, f in m.fits.items():
        p = f.profile
        md.append(f"| {ly} | {p.kind} | {p.value[min(1, len(p.value) - 1)]:.3g} | "
                  f"{p.value[-1]:.3g} | {f.preferred} | {f.share:.0%} | "
                  f"{f.xi:.3g} {_ci(f.xi_lo, f.xi_hi)} | {f.alpha:.3g} {_ci(f.alpha_lo, f.alpha_hi)} | "
                  f"{f.chi2['exponential']:.3g} / {f.chi2['power law']:.3g} ({f.dof}) |")
    ssm = [ly for ly, f in m.fits.items() if f.profile.intrinsic is not None]
    if ssm:
        md += ["", "Mamba-style layers " + ", ".join(map(str, ssm)) + ": the intrinsic kernel "
               "K_A(k) = ⟨e^{−Δ_t·λ_A·k}⟩ (input-history memory of the SSM alone) at k = 1 and K "
               "against the complete block's m(k): " + "; ".join(
                   f"layer {ly}: K_A {m.fits[ly].profile.intrinsic[1]:.3g} / "
                   f"{m.fits[ly].profile.intrinsic[-1]:.3g}, m {m.fits[ly].profile.value[1]:.3g} / "
                   f"{m.fits[ly].profile.value[-1]:.3g}" for ly in ssm) + "."]
    return md + ["", f"**{FIGURE}** — {CAPTION}", ""]


def comparison_markdown(studies: dict, layers: dict, deltas: list, heading: str = "###") -> list:
    md = [f"{heading} Token memory side by side", "",
          "| model | layer | preferred | ξ (tokens) | α |", "|---|---|---|---|---|"]
    for n, s in studies.items():
        f = s.fits[layers[n]]
        md.append(f"| {n} | {layers[n]} | {f.preferred} ({f.share:.0%}) | {f.xi:.3g} "
                  f"{_ci(f.xi_lo, f.xi_hi)} | {f.alpha:.3g} {_ci(f.alpha_lo, f.alpha_hi)} |")
    md += ["", "| pair | layers | Δ | value | CI | verdict |", "|---|---|---|---|---|---|"]
    for x in deltas:
        md.append(f"| {x.a} − {x.b} | {x.layer_a} / {x.layer_b} | {'Δα' if x.what == 'alpha' else 'Δξ'} "
                  f"| {x.delta:+.4g} | {_ci(x.lo, x.hi)} | {x.verdict} |")
    return md + [""]


def comparison_figure(studies: dict, layers: dict):
    fig = new_figure(11, 4)
    ax = fig.subplots(1, 2)
    for k, (n, s) in enumerate(studies.items()):
        p = s.fits[layers[n]].profile
        for a, view in zip(ax, ("loglog", "linlog")):
            p.plot(a, view, color=f"C{k}", label=f"{n}, layer {layers[n]}")
    ax[0].legend(fontsize=7)
    panel_label(ax[0], "a")
    panel_label(ax[1], "b")
    return fig

