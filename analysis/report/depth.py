"""The depth section of `tdos analyze` and `tdos compare`: one figure, markdown, and the
comparison of models' depth curves (analysis/studies/depth.py computes the numbers)."""
from __future__ import annotations

import numpy as np

from analysis._format import ci
from analysis._plot import interval_bars, new_figure, panel_label, sweep_colors, window_lines
from analysis.report.text import FIGURE_CAPTIONS
from sweep.format.settings import MODES

FIGURE = "depth.png"
CAPTION = FIGURE_CAPTIONS[FIGURE]


def _mean(m) -> str:
    """A mean with its CI (studies/depth.MeanCI)."""
    return f"{m.value:.4g} {ci(m.lo, m.hi, '.3g')}"


def figure(d, title: str, primary=None):
    """The depth figure of DepthStudy `d`; panel (a) draws the headline's estimator (`primary`,
    a settings.Primary; None: the cumulative fit) for both counts."""
    fig = new_figure(15, 8.5)
    ax = fig.subplots(2, 3).ravel()
    _beta_panel(ax[0], d, "cumulative" if primary is None else primary.estimator)
    starts = sorted({p.layer for p in d.kernel})
    for c, ly in zip(sweep_colors(len(starts)), starts):
        pts = [p for p in d.kernel if p.layer == ly]
        s = [p.span for p in pts]
        ax[1].plot(s, [p.measured.value for p in pts], "o-", color=c, label=f"l = {ly} measured g")
        ax[1].plot(s, [p.independent.value for p in pts], "s--", color=c, mfc="none",
                   label=f"l = {ly} Π‖J_j‖²/d")
        ax[1].plot(s, [p.spectral.value for p in pts], "^:", color=c, mfc="none",
                   label=f"l = {ly} ΠΣ|ζ_j|²/d")
    ax[1].set_yscale("log")
    _span_axis(ax[1], d.spans)
    ax[1].set_ylabel("mean squared gain (geometric mean over tokens)")
    ax[1].legend(fontsize=6, ncol=2)
    edges = np.logspace(-12, 3, 151)
    longest = max(d.spans)
    gam = -d.lyapunov[np.isfinite(d.lyapunov)]
    drawn = 0
    for lam, label in ((d.rates[1], "single blocks λ"), (d.rates[longest], f"stack s = {longest}: λ^(s)"),
                       (gam[gam > 0], "Lyapunov rates −γ > 0")):
        h, _ = np.histogram(lam, edges)
        drawn += h.sum()
        ax[2].step(edges[:-1], h / max(len(lam), 1) / np.diff(np.log10(edges)), where="post", label=label)
    window_lines(ax[2], d.window)
    ax[2].set_xscale("log")
    if drawn:
        ax[2].set_yscale("log")
    ax[2].set_xlabel("rate")
    ax[2].set_ylabel("density per decade")
    ax[2].legend(fontsize=8)
    i = (np.arange(len(d.lyapunov_mean)) + 0.5) / max(len(d.lyapunov_mean), 1)
    mean = np.array([m.value for m in d.lyapunov_mean])
    ax[3].fill_between(i, [m.lo for m in d.lyapunov_mean], [m.hi for m in d.lyapunov_mean], alpha=0.3)
    ax[3].plot(i, mean, "-")
    ax[3].axhline(0, color="k", lw=0.6)
    ax[3].set_xlabel("exponent index i / d")
    ax[3].set_ylabel(f"⟨γ_i⟩ over layers {d.layers[0]}..{d.layers[1]}")
    for a, series, label in ((ax[4], d.nonnormality, "Henrici departure of J_tt"),
                             (ax[5], d.frobenius, "‖J_tt‖_F² / d")):
        ls = list(series)
        interval_bars(a, ls, *([getattr(series[x], f) for x in ls] for f in ("value", "lo", "hi")),
                      fmt="o-")
        a.set_xticks(ls)
        a.set_xlabel("layer")
        a.set_ylabel(label)
    for a, letter in zip(ax, "abcdef"):
        panel_label(a, letter)
    fig.suptitle(title)
    return fig


def _beta_panel(ax, d, estimator) -> None:
    """β of the per-step rates against span s, estimator `estimator` of both counts, each with
    its CI; hollow where the power law is rejected (a window slope), as in Fig 8."""
    pre = "mle_" if estimator == "mle" else ""
    for k, m in enumerate(MODES):
        rows = d.beta[m]
        s = np.array(list(rows))
        x = s * (1 + 0.04 * k)
        b = np.array([getattr(rows[v], pre + "beta") for v in s], float)
        interval_bars(ax, x, b, [getattr(rows[v], pre + "ci_lo") for v in s],
                      [getattr(rows[v], pre + "ci_hi") for v in s], fmt="-", color=f"C{k}",
                      label=f"{estimator}:{m}")
        slope = np.array([rows[v].gof_p < 1 - d.level for v in s])
        ax.plot(x[~slope], b[~slope], "o", color=f"C{k}", ls="none")
        ax.plot(x[slope], b[slope], "o", mfc="none", mec=f"C{k}", mew=1.5, ls="none")
    _span_axis(ax, d.spans)
    ax.set_ylabel(f"β of λ^(s) = −ln|ζ|/s [{estimator}]")
    ax.set_title("the headline's estimator; hollow: a window slope", fontsize=8)
    ax.legend(fontsize=8)


def _span_axis(ax, spans) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(spans, [str(s) for s in spans])
    ax.minorticks_off()
    ax.set_xlabel("span s (blocks)")


def markdown(d) -> list:
    """The depth section of report.md for one model."""
    l0, l1 = d.layers
    unit = d.top.unit if d.top else "–"
    md = [f"### Depth: stacked blocks over layers {l0}..{l1} ({l1 - l0 + 1} blocks)", "",
          f"Per-step rates λ^(s) = −ln|ζ|/s of the eigenvalues of P_t(l, s) = J^(l+s−1)_tt ⋯ "
          f"J^(l)_tt, pooled over every start l and {d.n_tokens} walked tokens; s = 1 is the "
          f"single blocks of the same layers. symmetry-removed drops, for s > 1, the eigenvalue "
          f"along 𝟙/√d where P_t's Rayleigh residual there is small (LayerNorm's shift, "
          f"invariant under every block and so under their product; RMSNorm has none) and the "
          f"per-step rates below the floor {d.floor:g} (the norm's scale direction h_t is "
          f"invariant under one block only). Window [{d.window[0]:g}, {d.window[1]:g}], {d.level:.0%} CIs resampling "
          f"{unit}.", "",
          "| s | count | β (cumulative) | CI | in-window modes | MLE β | KS p | below floor |",
          "|---|---|---|---|---|---|---|---|"]
    for s in d.spans:
        for m in MODES:
            r = d.beta[m][s]
            beta = f"{r.beta:+.3f}" if r.fitted else "not fitted"
            md.append(f"| {s} | {m} | {beta} | [{r.ci_lo:+.3f}, {r.ci_hi:+.3f}] | {r.n_modes:,} | "
                      f"{r.mle_beta:+.3f} | {r.gof_p:.2f} | "
                      f"{d.below_floor[s] if m == 'all-stable' else '–'} |")
    md += _kernel_markdown(d)
    md += ["", f"Finite-depth Lyapunov exponents over layers {l0}..{l1}: γ_i = (1/S) ln σ_i of "
           f"the singular values of P_t({l0}, S), S = {l1 - l0 + 1} (invariant to an orthogonal "
           f"change of basis): top γ_1 = {_mean(d.top)}, "
           f"{_mean(d.positive)} of {len(d.lyapunov_mean)} exponents positive per token"
           + (f"; {d.singular} token(s) with a singular P_t left out" if d.singular else "") + ".",
           "", "| layer | Henrici departure of J_tt | ‖J_tt‖_F²/d |", "|---|---|---|"]
    md += [f"| {ly} | {_mean(d.nonnormality[ly])} | {_mean(d.frobenius[ly])} |" for ly in d.nonnormality]
    md += ["", f"**{FIGURE}** — {CAPTION}", ""]
    return md


def _kernel_markdown(d) -> list:
    """The kernel's decomposition: geometric means with CIs, arithmetic means beside them."""
    md = ["", "The response kernel, like for like over each stack's own layers j = l..l+s−1, per "
          "token: measured g = ‖P_t(l, s)‖_F²/d; spectral Π_j Σ|ζ_j|²/d; independent layers "
          "Π_j ‖J_j‖_F²/d; non-normality = independent / spectral (1 for normal blocks); "
          "alignment = measured / independent (1 for independently oriented layers, above 1 when "
          "amplifying directions line up across depth). Each is a ratio or product of "
          "basis-invariant traces. Geometric means over tokens with their CIs (resampled on the "
          "log scale); in brackets the arithmetic means ⟨g⟩, Π_j⟨·⟩ and their ratios, labelled "
          "arith.", "",
          "| start l | s | measured g | spectral | independent | non-normality | alignment |",
          "|---|---|---|---|---|---|---|"]
    for p in d.kernel:
        cells = [f"{_mean(getattr(p, k))} (arith. {p.arithmetic[k]:.4g})" for k in p.PARTS]
        md.append(f"| {p.layer} | {p.span} | " + " | ".join(cells) + " |")
    return md


def comparison_markdown(studies: dict, deltas: list, heading: str = "###") -> list:
    """β against s of every model side by side, then every Δ with its CI."""
    names = list(studies)
    spans = sorted(set().union(*(d.spans for d in studies.values())))
    md = [f"{heading} Depth curves side by side", "",
          "β of the per-step rates λ^(s) = −ln|ζ|/s (all-stable | symmetry-removed), each with "
          "its CI; top Lyapunov exponent γ_1 over each model's run.", "",
          "| s | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for s in spans:
        cells = []
        for n in names:
            d = studies[n]
            cells.append(" / ".join(f"{d.beta[m][s].beta:+.3f} [{d.beta[m][s].ci_lo:+.3f}, "
                                    f"{d.beta[m][s].ci_hi:+.3f}]" for m in MODES)
                         if s in d.spans else "–")
        md.append(f"| {s} | " + " | ".join(cells) + " |")
    md.append("| γ_1 | " + " | ".join(f"{_mean(studies[n].top)} (layers {studies[n].layers[0]}.."
                                      f"{studies[n].layers[1]})" for n in names) + " |")
    md += ["", "| pair | quantity | s | count | Δ | CI | verdict |", "|---|---|---|---|---|---|---|"]
    for x in deltas:
        md.append(f"| {x.a} − {x.b} | {'β' if x.what == 'beta' else 'γ_1'} | {x.span or '–'} | "
                  f"{x.modes or '–'} | {x.delta:+.4f} | [{x.lo:+.4f}, {x.hi:+.4f}] | {x.verdict} |")
    return md + [""]


def comparison_figure(studies: dict):
    """β against s of every model (both counts) and their top Lyapunov exponents."""
    fig = new_figure(11, 4)
    ax = fig.subplots(1, 2)
    for k, (n, d) in enumerate(studies.items()):
        for j, m in enumerate(MODES):
            s, rows = np.array(d.spans), d.beta[m]
            interval_bars(ax[0], s * (1 + 0.03 * (2 * k + j)), [rows[x].beta for x in s],
                          [rows[x].ci_lo for x in s], [rows[x].ci_hi for x in s],
                          fmt="o-" if j == 0 else "s--", color=f"C{k}", label=f"{n} [{m}]")
        interval_bars(ax[1], [k], [d.top.value], [d.top.lo], [d.top.hi], fmt="o", color=f"C{k}",
                      capsize=4)
    _span_axis(ax[0], sorted(set().union(*(d.spans for d in studies.values()))))
    ax[0].set_ylabel("β of λ^(s) [cumulative]")
    ax[0].set_title("the cumulative fit: a diagnostic", fontsize=8)
    ax[0].legend(fontsize=7)
    ax[1].set_xticks(range(len(studies)), list(studies))
    ax[1].set_ylabel("top Lyapunov exponent γ_1")
    panel_label(ax[0], "a")
    panel_label(ax[1], "b")
    return fig
