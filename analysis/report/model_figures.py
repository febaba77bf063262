"""Every figure of one model's section, drawn from its `ModelAnalysis` alone, in the order the
report shows them (analysis/report/render.py writes them)."""
from __future__ import annotations

from analysis.report import figures as F
from analysis.report.depth import FIGURE as DEPTH_FIGURE
from analysis.report.depth import figure as depth_figure
from analysis.report.memory import FIGURE as MEMORY_FIGURE
from analysis.report.memory import figure as memory_figure
from analysis.report.nulls import DEPTH_FIGURE as NULLS_DEPTH_FIGURE
from analysis.report.nulls import FIGURE as NULL_FIGURE
from analysis.report.nulls import depth_figure as nulls_depth_figure
from analysis.report.nulls import figure as null_figure


def model_figures(r) -> list:
    """[(file name, Figure)] of ModelAnalysis `r`; collective figures draw its mode count."""
    layer, L, modes, window = r.layer, r.L, r.modes, r.settings.window
    tag, mtag, p, sp = f"{r.name}, layer {layer}", f"[{modes} modes]", r.primary, r.spectra
    figs = [("fig1_collective_spectrum.png",
             F.fig1_collective(sp.complex, sp.tdos, sp.kernel, f"{tag}, L = {L} {mtag}", window))]
    figs += _decay_figures(r.name, r.decay) if r.decay is not None else []
    diag = ("the headline's estimator" if p.name == f"cumulative:{modes}"
            else f"a diagnostic;\nthe headline ({p.name}) is in the box")
    figs += [
        ("fig5_tdos_vs_length.png", F.fig_family(sp.by_length, f"{tag}: ρ_block vs L {mtag}",
                                                 ylabel="ρ_block(λ)", window=window)),
        ("fig6_tdos_vs_depth.png", F.fig_family(sp.by_depth, f"{r.name}: ρ_block across depth, "
                                                f"L = {L} {mtag}", ylabel="ρ_block(λ)",
                                                window=window)),
        ("fig7_cumulative_fits.png", F.fig7_cumulative(
            r.table, f"{tag}: cumulative N(<λ) and fits\n[cumulative:{modes}: {diag}]",
            r.headline)),
        ("fig8_beta_vs_length.png", F.fig_beta(r.table, f"{tag}: primary β vs L\n[{p.name}]",
                                               r.paper.values or None, p)),
        ("beta_vs_depth.png", F.fig_beta(r.depth, f"{r.name}: primary β across depth, L = {L}\n"
                                                  f"[{p.name}]", primary=p)),
        ("window_sensitivity.png", F.fig_window(r.sensitivity[modes], sp.gof,
                                                f"{tag}, L = {L}: is it a power law? {mtag}", p))]
    if r.laws is not None:
        figs.append(("self_averaging.png", F.fig_self_averaging(
            r.laws.self_averaging, r.laws.resolution,
            f"{tag}: self-averaging (App. B) [{modes} modes, cumulative β]", r.laws.kernel)))
    if r.stacks is not None:
        figs.append((DEPTH_FIGURE, depth_figure(r.stacks, f"{r.name}: stacked blocks, layers "
                                                f"{r.stacks.layers[0]}..{r.stacks.layers[1]}", p)))
    if r.memory is not None:
        figs.append((MEMORY_FIGURE, memory_figure(r.memory, f"{r.name}: token memory "
                                                  f"({r.memory.meta['estimator']})")))
    if r.null_bands is not None:
        figs.append((NULL_FIGURE, null_figure(
            r.null_bands, r.name, f"{tag}: trained TDOS over each null kind's band,\nall on the "
                                  f"nulls' tokens (legend) [{r.primary.modes} modes]")))
    if r.nulls_depth is not None:
        figs.append((NULLS_DEPTH_FIGURE, nulls_depth_figure(
            r.nulls_depth, f"{r.name}: against its nulls across depth, on the nulls' tokens "
                           f"[{r.primary.modes} modes]")))
    return figs


def _decay_figures(name, d) -> list:
    """Figs 2–4 of the layer with a learned decay (measure/figures.Decay)."""
    which = (f"layer {d.layer} ({d.kind})" if d.layer == d.representative else
             f"layer {d.layer} ({d.kind}: the layer with a decay nearest the representative layer "
             f"{d.representative}, a {d.representative_kind} layer)")
    of = f" of {d.n_model_layers}" if d.n_decay_layers < d.n_model_layers else ""
    return [
        ("fig2_intrinsic.png", F.fig2_intrinsic(d.a_log, d.intrinsic, d.kernel_a,
                                                f"{name}: intrinsic SSM spectrum, {which} "
                                                f"({d.modes_of})")),
        ("fig3_intrinsic_all_layers.png", F.fig_family(
            d.by_layer, f"{name}: ρ_int across its {d.n_decay_layers} layers with a decay{of} "
                        f"({d.modes_of})", ylabel="ρ_int(λ_A)")),
        ("fig4_effective_vs_length.png", F.fig4_effective(
            d.effective, d.delta, f"{name}, {which}: selective dynamics vs L (every Δ_t·λ_A mode)"))]
