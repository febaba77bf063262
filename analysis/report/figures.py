"""The paper's figures 1–8 (and diagnostics) from result objects; each returns a Figure."""
from __future__ import annotations

from analysis._plot import new_figure, panel_label, window_lines
from sweep.format.settings import MODES, WINDOW


def _window_lines(ax, window=WINDOW):
    window_lines(ax, window)


def fig1_collective(cs, sp, kernel, title, window=WINDOW):
    """(a) ζ plane, (b) near ζ = 1, (c) |ζ|, (d) θ, (e) λ–θ, (f) ρ linear, (g) ρ log, (h) K(t)."""
    fig = new_figure(20, 9.5)
    axs = fig.subplots(2, 4)
    kinds = ("plane", "zoom", "modulus", "phase", "joint")
    for ax, kind in zip(axs.flat[:5], kinds):
        cs.plot(ax, kind=kind)
    sp.plot(axs.flat[5], view="linear", label="ρ_block")
    sp.plot(axs.flat[6], view="log", color="C0", label="ρ_block")
    _window_lines(axs.flat[6], window)
    # the counts go inside the panel: as a title they collide with the panel letter
    axs.flat[6].text(0.03, 0.03, _counts_text(sp), transform=axs.flat[6].transAxes, fontsize=8,
                     va="bottom", bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"})
    kernel.plot(axs.flat[7])
    for ax, letter in zip(axs.flat, "abcdefgh"):
        panel_label(ax, letter)
    fig.suptitle(title)
    return fig


def _counts_text(sp) -> str:
    """What a collective spectrum counts: its mode count, the modes left out, the overflow."""
    s = sp.special
    text = f"{sp.n_modes:,} stable [{sp.modes}]\n"
    if sp.modes == "all-stable":
        text += f"left out: |ζ| ≥ 1 {s.get('unstable', 0):,}, ζ = 0 {s.get('zero', 0):,}"
    else:
        text += (f"left out: scale {s.get('scale', 0):,}, marginal {s.get('marginal', 0):,}\n"
                 f"unstable {s.get('unstable', 0):,}, zero {s.get('zero', 0):,}")
    note = sp.outside_note()
    return text + (f"\n{note}" if note else "")


def fig2_intrinsic(alog, sp_int, kernel_a, title):
    """(a) A_log distribution, (b) ρ_int(λ_A), (c) K_A(t) with the t^-1 reference."""
    fig = new_figure(15, 4.3)
    a, b, c = fig.subplots(1, 3)
    alog.plot(a)
    sp_int.plot(b, color="C2")
    b.text(0.03, 0.03, f"{sp_int.n_modes:,} modes\n{sp_int.outside_note()}".strip(),
           transform=b.transAxes, fontsize=7, va="bottom")
    kernel_a.plot(c, color="C2")
    for ax, letter in zip((a, b, c), "abc"):
        panel_label(ax, letter)
    fig.suptitle(title)
    return fig


def fig_family(family, title, ylabel="ρ(λ)", window=None, view="log"):
    """Figs 3, 5, 6: spectra of a sweep overlaid in viridis order."""
    fig = new_figure(7, 5)
    ax = fig.add_subplot()
    family.plot(ax, view=view, ylabel=ylabel)
    if window:
        _window_lines(ax, window)
    ax.set_title(title)
    return fig


def fig4_effective(eff_family, delta_family, title):
    """(a) ρ_eff(λ_eff) vs L, (b) Δ distributions vs L."""
    fig = new_figure(13, 5)
    a, b = fig.subplots(1, 2)
    eff_family.plot(a, ylabel="ρ_eff(λ_eff)")
    delta_family.plot(b, ylabel="p(Δ)")
    panel_label(a, "a"), panel_label(b, "b")
    fig.suptitle(title)
    return fig


def fig7_cumulative(table, title, headline=None):
    """Fig 7: N(<λ) with the cumulative fit per L (a diagnostic where the headline is another
    estimator); `headline` (the model's Headline) is said inside the panel beside them."""
    fig = new_figure(7, 5)
    ax = fig.add_subplot()
    table.plot_cumulative(ax)
    if headline is not None:
        _headline_box(ax, headline)
    ax.set_title(title, fontsize=10)
    return fig


def _headline_box(ax, h, where=(0.02, 0.98)):
    """The headline β in a box at the top left of `ax`, so a panel of diagnostics is never read
    without the result beside it."""
    ax.text(*where, f"the headline, {h.name} at L = {h.L}:\n{h.value()}", transform=ax.transAxes,
            fontsize=7, va="top", ha="left",
            bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "0.6"})


def fig_beta(table, title, reference=None, primary=None):
    """Fig 8 (β vs L, with the paper's values) or β vs depth: the β of `primary` (a
    settings.Primary; None: the table's count, cumulative fit)."""
    fig = new_figure(7, 4.5)
    ax = fig.add_subplot()
    kw = {} if primary is None else {"modes": primary.modes, "estimator": primary.estimator}
    table.plot(ax, reference=reference, **kw)
    ax.set_title(title)
    return fig


def fig_self_averaging(selfavg, resolution, title, kernel=None):
    """App. B laws with fitted slopes and CIs: (a) band-weight variance vs T, (b) deep-IR
    resolution vs T·d, (c) the memory kernel's long-time exponent (when given)."""
    fig = new_figure(19 if kernel is not None else 13, 4.8)
    axs = fig.subplots(1, 3 if kernel is not None else 2)
    selfavg.plot(axs[0])
    resolution.plot(axs[1])
    if kernel is not None:
        kernel.plot(axs[2])
    for ax, letter in zip(axs, "abc"):
        panel_label(ax, letter)
    fig.suptitle(title)
    return fig


def fig_shape_and_positions(shape, by_position):
    """The study's exploratory pictures of one model at its representative layer: (a) the local
    exponent per half-decade over each null kind's band (None: no nulls), (b) β per position."""
    panels = [p for p in (shape, by_position) if p is not None]
    fig = new_figure(6.5 * len(panels), 4.5)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, part, letter in zip(axes, panels, "ab"):
        part.plot(ax)
        panel_label(ax, letter)
    fig.suptitle("exploratory: the density's shape and β along the sequence (no verdict)",
                 fontsize=10)
    return fig


def fig_precision(cmp, title):
    """(a) |δλ|/λ of matched modes against λ, (b) both TDOS with Δβ per L."""
    fig = new_figure(13, 5)
    a, b = fig.subplots(1, 2)
    cmp.plot(a)
    cmp.plot_tdos(b)
    panel_label(a, "a"), panel_label(b, "b")
    fig.suptitle(title)
    return fig


def fig_window(sensitivity, gof, title, primary=None):
    """Is it a power law? (a) local exponent β(λ) with CI and the window's two estimators (the
    headline's estimator, `primary`, named as such), (b) β as each window edge moves, (c) the
    in-window CDF against the fit (KS, p)."""
    fig = new_figure(19, 4.8)
    a, b, c = fig.subplots(1, 3)
    sensitivity.local.plot(a)
    base = [r for r in sensitivity.rows if r["factor"] == 1.0][0]
    role = {e: "the headline's estimator" if primary is not None and primary.estimator == e
            else "a diagnostic" for e in ("cumulative", "mle")}
    a.axhline(base["beta_cumulative"], color="C1", lw=0.8,
              label=f"cumulative fit (the paper's; {role['cumulative']})")
    a.axhline(base["beta_mle"], color="C0", ls="--", lw=0.8, label=f"in-window MLE ({role['mle']})")
    a.legend(fontsize=7)
    sensitivity.plot(b)
    gof.plot(c)
    for ax, letter in zip((a, b, c), "abc"):
        panel_label(ax, letter)
    fig.suptitle(title)
    return fig


def fig_compare_beta(comparison):
    """β vs L (representative layers) and vs relative depth (shared L), both counts."""
    fig = new_figure(13, 8.5)
    axs = fig.subplots(2, 2, sharey="row")
    for i, m in enumerate(MODES):
        for j, side in enumerate(comparison.sides):
            kw = dict(fmt="osD^v<>"[j % 7] + "-", color=f"C{j}", capsize=3, label=side.label)
            for ax, pts, xs in ((axs[i, 0], side.by_length[m], None),
                                (axs[i, 1], side.by_layer[m], side.depth)):
                keys = list(pts)
                x = [k * 1.04 ** j for k in keys] if xs is None else [xs(k) + 0.01 * j for k in keys]
                b = [pts[k].beta for k in keys]
                err = [[max(bb - pts[k].lo, 0) for k, bb in zip(keys, b)],
                       [max(pts[k].hi - bb, 0) for k, bb in zip(keys, b)]]
                ax.errorbar(x, b, yerr=err, **kw)
        axs[i, 0].set_xscale("log", base=2)
        axs[i, 0].set_xlabel("sequence length L (tokens), representative layers")
        axs[i, 1].set_xlabel(f"relative depth layer/(layers − 1), L = {comparison.sides[0].L}")
        for ax in axs[i]:
            ax.axhline(0, color="k", lw=0.6)
            ax.set_ylabel(f"β [cumulative:{m}]")
            ax.legend(fontsize=7)
    fig.suptitle(f"β of every model, the cumulative fit of both counts (a diagnostic; the verdicts "
                 f"read the primary β); {comparison.settings.level:.0%} CIs, each resampling its "
                 f"model's own units; window "
                 f"[{comparison.settings.window[0]:g}, {comparison.settings.window[1]:g}]")
    return fig


def fig_compare_delta(comparison):
    """Δβ with its CI against L and against relative depth, every pair and count."""
    fig = new_figure(13, 4.8)
    a, b = fig.subplots(1, 2, sharey=True)
    pairs = sorted({(d.a, d.b) for d in comparison.deltas})
    side = {s.name: s for s in comparison.sides}
    for i, (pa, pb) in enumerate(pairs):
        for j, m in enumerate(("all-stable", "symmetry-removed")):
            ds = [d for d in comparison.deltas if (d.a, d.b, d.modes) == (pa, pb, m)]
            byL = [d for d in ds if d.along == "L"]
            byD = [d for d in ds if d.along == "depth"]
            kw = dict(fmt="os"[j] + ("-" if j == 0 else "--"), color=f"C{i}", capsize=3,
                      label=f"{pa} − {pb} [{m}]")
            for ax, sel, xf in ((a, byL, lambda d: d.L * 1.04 ** j),
                                (b, byD, lambda d: side[pa].depth(d.layer_a) + 0.01 * j)):
                if sel:
                    ax.errorbar([xf(d) for d in sel], [d.delta for d in sel],
                                yerr=[[max(d.delta - d.lo, 0) for d in sel],
                                      [max(d.hi - d.delta, 0) for d in sel]], **kw)
    a.set_xscale("log", base=2)
    a.set_xlabel("sequence length L (tokens)")
    b.set_xlabel("relative depth of the first model's layer")
    for ax in (a, b):
        ax.axhline(0, color="k", lw=0.8)
        ax.set_ylabel("Δβ (cumulative fit)")
        ax.legend(fontsize=7)
    fig.suptitle(f"Δβ with {comparison.settings.level:.0%} CIs: 0 inside the bar = no difference "
                 f"shown (uncorrected)")
    return fig


def fig_compare_tdos(panels, depths, window, title):
    """One panel per matched relative depth: every model's normalised ρ_block overlaid."""
    fig = new_figure(4.2 * max(len(panels), 1), 4.2)
    axs = fig.subplots(1, max(len(panels), 1), squeeze=False)[0]
    for ax, spectra, dep in zip(axs, panels, depths):
        for i, (label, sp) in enumerate(spectra):
            if sp.n_modes:
                sp.plot(ax, color=f"C{i}", label=f"{label}, {sp.label}")
        _window_lines(ax, window)
        ax.set_title(f"relative depth {dep:.2f}", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    return fig


def fig_compare_kernel(kernels, window, title):
    """Every model's K(t) on one axis, the window's times marked."""
    fig = new_figure(7, 5)
    ax = fig.add_subplot()
    for i, (_, k) in enumerate(kernels):
        k.plot(ax, color=f"C{i}")
    for v in window:
        ax.axvline(1 / v, color="0.6", ls=":", lw=0.8)
    ax.set_title(title)
    return fig
