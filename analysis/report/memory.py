"""The token-memory section of `tdos analyze` and `tdos compare`: fits per layer, one
figure, markdown, and the comparison of models (analysis/studies/memory.py computes the
numbers: MemoryStudy, compare_memory)."""
from __future__ import annotations

import numpy as np

from analysis._format import ci
from analysis._plot import interval_bars, new_figure, panel_label, sweep_colors
from analysis.report.text import FIGURE_CAPTIONS

FIGURE = "memory.png"
CAPTION = FIGURE_CAPTIONS[FIGURE]
SYMBOL = {"xi": "ξ", "alpha": "α", "alpha_1": "α₁", "alpha_2": "α₂", "k_break": "k_b"}


def figure(m, title: str):
    fig = new_figure(12, 8)
    ax = fig.subplots(2, 2).ravel()
    layers = list(m.fits)
    for c, ly in zip(sweep_colors(len(layers)), layers):
        m.fits[ly].profile.plot(ax[0], "loglog", color=c)
        m.fits[ly].profile.plot(ax[1], "linlog", color=c)
    ax[0].legend(fontsize=7, ncol=2)
    for a, what, law, label in ((ax[2], "alpha", "power law", "power-law exponent α"),
                                (ax[3], "xi", "exponential", "memory length ξ (tokens)")):
        _parameter_panel(a, m, what, law, label)
    for a, letter in zip(ax, "abcd"):
        panel_label(a, letter)
    fig.suptitle(title)
    return fig


def _parameter_panel(a, m, what, law, label) -> None:
    """One law's parameter per layer, each point alone: no line joins layers (a trend would be
    a claim), a rejected law's value hollow and grey with × (a slope of the window, as the
    report's †), and nothing where the replicates split (the report prints "–")."""
    layers, drawn = list(m.fits), 0
    for ly in layers:
        f, v = m.fits[ly], getattr(m.fits[ly], what)
        if f.split or not np.isfinite(v):
            continue
        rejected = law in f.laws and f.laws[law].rejected
        style = {"mfc": "none", "color": "0.55"} if rejected else {"color": "C0"}
        interval_bars(a, [ly], [v], [getattr(f, what + "_lo")], [getattr(f, what + "_hi")],
                      fmt="o", **style)
        if f.law == law:
            a.plot([ly], [v], "s", mfc="none", ms=11, color="C3")
        if rejected:
            a.plot([ly], [v], "x", ms=9, color="k")
        drawn += 1
    if not drawn:
        a.text(0.5, 0.5, "no parameter: the replicates split at every layer", ha="center",
               transform=a.transAxes, fontsize=8)
    a.set_xticks(layers)
    a.set_xlabel(f"layer\n□: the law (BIC, ≥ {m.RULES['share_min']:.0%} of replicates); hollow ×: "
                 f"rejected (p < {m.RULES['p_reject']:g}), a slope of the window", fontsize=9)
    a.set_ylabel(label)


def _param(f, law, name) -> str:
    """"α = 1.9 [1.7, 2.2]", marked † where the law is rejected (a window slope); "–" where
    the replicates split (no law is read)."""
    lf = f.laws.get(law)
    if lf is None or f.split:
        return "–"
    return f"{lf.params[name]:.3g} {ci(*lf.ci[name], '.3g')}{' †' if lf.rejected else ''}"


def _preferred(f) -> str:
    """The law BIC prefers, or "–" where the replicates split (no law verdict)."""
    return "–" if f.split else f.preferred


def markdown(m) -> list:
    meta, rules = m.meta, m.RULES
    first = next(iter(m.fits.values()))
    md = [f"### Token memory ({meta['estimator']}, lags 0..{meta['lags']}, output tokens "
          f"t = 0, {meta['every']}, {2 * meta['every']}, …)", "",
          f"m(k) = ⟨‖J_{{t,t−k}}‖_F² / ‖J_tt‖_F²⟩ over the sampled tokens t ≥ k. Each layer's "
          f"window starts past its causal convolution (lags ≥ its width; from 1 without one); "
          f"fits by {first.method}. The law of smallest BIC (χ² + parameters·ln lags) is "
          f"preferred; **{rules['neither']}** when its χ² p < {rules['p_reject']:g}; "
          f"**{rules['split']}** when fewer than {rules['share_min']:.0%} of the replicates pick "
          f"it: then no law and no parameter is printed, only m(k) with its CIs. χ² = rᵀC⁻¹r with the lags' covariance C (the same tokens "
          f"enter every lag); C is estimated, so p is approximate. † a rejected law's parameter: "
          f"a slope of the window, not an exponent. "
          f"{first.level:.0%} CIs resampling each layer's units (below); m(k)'s CIs on the log "
          f"scale (never below 0).", "",
          "| layer | kind | window | m(k_lo) | m(K) | preferred (BIC) | verdict | replicates "
          "agreeing | ξ (tokens) | α | broken: α₁ / α₂ / k_b |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for ly, f in m.fits.items():
        p = f.profile
        broken = " / ".join(_param(f, "broken power law", n) for n in ("alpha_1", "alpha_2", "k_break"))
        md.append(f"| {ly} | {p.kind} | {f.window[0]}..{f.window[1]} | {p.value[f.window[0]]:.3g} "
                  f"{ci(p.lo[f.window[0]], p.hi[f.window[0]], '.3g')} | {p.value[-1]:.3g} "
                  f"{ci(p.lo[-1], p.hi[-1], '.3g')} | {_preferred(f)} | {f.verdict} | {f.share:.0%} | "
                  f"{_param(f, 'exponential', 'xi')} | {_param(f, 'power law', 'alpha')} | {broken} |")
    md += ["", "Windows and resampling units: " + "; ".join(
        f"layer {ly}: {f.window_rule}, {f.unit}" for ly, f in m.fits.items()) + ".", "",
           "Goodness of fit of every law (χ² of the generalised least squares fit of ln m(k), its "
           "degrees of freedom = lags − parameters, p = P(χ²_dof > χ²); ΔBIC against the preferred "
           "law):", "", "| layer | law | χ² | dof | p | ΔBIC |", "|---|---|---|---|---|---|"]
    for ly, f in m.fits.items():
        best = f.laws[f.preferred].bic if f.preferred in f.laws else np.nan
        for law in rules["laws"]:
            if law in f.laws:
                lf = f.laws[law]
                md.append(f"| {ly} | {law} | {lf.chi2:.3g} | {lf.dof} | {lf.p:.2g} | "
                          f"{lf.bic - best:+.3g} |")
    return md + _intrinsic_lines(m) + ["", f"**{FIGURE}** — {CAPTION}", ""]


def _intrinsic_lines(m) -> list:
    ssm = [ly for ly, f in m.fits.items() if f.profile.intrinsic is not None]
    if not ssm:
        return []
    at = [f"layer {ly}: K_A² {p.intrinsic[k]:.3g} / {p.intrinsic[-1]:.3g}, m {p.value[k]:.3g} / "
          f"{p.value[-1]:.3g}" for ly in ssm
          for p, k in [(m.fits[ly].profile, m.fits[ly].window[0])]]
    return ["", "Mamba-style layers " + ", ".join(map(str, ssm)) + ": the SSM's own kernel, squared "
            "as m(k) is, K_A²(k) = ⟨e^{−2Δ_t·λ_A·k}⟩ over tokens and modes (1 at k = 0), at the "
            "window's first lag and at K, beside m(k): " + "; ".join(at) + ". K_A² weighs every "
            "mode alike and holds Δ_t fixed along the lag; m(k) weighs them through B, C, the gate "
            "and the output projection and is relative to ‖J_tt‖² (residual included): compare "
            "their decay, not their levels (docs/memory.md)."]


def comparison_markdown(studies: dict, layers: dict, deltas: list, heading: str = "###") -> list:
    md = [f"{heading} Token memory side by side", "",
          "| model | layer | window | preferred (BIC) | verdict | ξ (tokens) | α |",
          "|---|---|---|---|---|---|---|"]
    for n, s in studies.items():
        f = s.fits[layers[n]]
        md.append(f"| {n} | {layers[n]} | {f.window[0]}..{f.window[1]} | {_preferred(f)} "
                  f"({f.share:.0%}) | {f.verdict} | {_param(f, 'exponential', 'xi')} | "
                  f"{_param(f, 'power law', 'alpha')} |")
    md += ["", "A difference is taken of the parameter of the law both models prefer (ξ, α, or "
           "the broken law's α₂ past its break), only where each model's law fits and its "
           f"replicates agree (≥ {next(iter(studies.values())).RULES['share_min']:.0%}).", "",
           "| pair | layers | laws | Δ | value | CI | verdict |", "|---|---|---|---|---|---|---|"]
    for x in deltas:
        what = f"Δ{SYMBOL[x.what]}" if x.what else "–"
        value = f"{x.delta:+.4g}" if x.what else "–"
        md.append(f"| {x.a} − {x.b} | {x.layer_a} / {x.layer_b} | {' / '.join(x.preferred)} | "
                  f"{what} | {value} | {ci(x.lo, x.hi, '.3g')} | {x.verdict} |")
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
