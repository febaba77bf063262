"""`tdos analyze`: every figure, Table I, a JSON of every fitted number, one markdown report.
Every number is computed under one `Settings` (settings.py)."""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from analysis._plot import save
from analysis.fit.gof import power_law_gof
from analysis.fit.window import window_sensitivity
from analysis.io.aggregate import aggregate
from analysis.io.store import open_store
from analysis.laws.uncertainty import MeasuredLaws, measured_laws
from analysis.report import figures as F
from analysis.report.compare import comparison_markdown, write_comparison
from analysis.report.ensemble import add_ensembles
from analysis.report.depth import FIGURE as DEPTH_FIGURE
from analysis.report.depth import figure as depth_figure
from analysis.report.fits_json import headline, write_json
from analysis.report.markdown import table_markdown, write_report
from analysis.report.memory import FIGURE as MEMORY_FIGURE
from analysis.report.memory import figure as memory_figure
from analysis.studies.paper import reference
from analysis.studies.primary import (primary_of, representative, store_settings,
                                      why_representative)
from analysis.spectrum.observables import (a_log_distribution, a_log_shift, complex_spectrum,
                                           effective_vs_length, has_s4d_init, intrinsic_by_layer,
                                           intrinsic_spectrum, memory_kernel,
                                           memory_kernel_from_hist, tdos, tdos_vs_depth,
                                           tdos_vs_length, token_rate_rows)
from analysis.spectrum.rates import EDGES
from analysis.fit.multiplicity import Family
from analysis.studies.compare import compare_models
from analysis.studies.ensemble import ensemble_study
from analysis.studies.nulls import NullStudy, null_study
from analysis.studies.nulls_depth import DepthNullStudy, depth_null_study
from analysis.report.nulls import FIGURE as NULL_FIGURE
from analysis.report.nulls import figure as null_figure
from analysis.report.nulls import DEPTH_FIGURE as NULLS_DEPTH_FIGURE
from analysis.report.nulls import depth_figure as nulls_depth_figure
from analysis.studies.depth import DepthStudy, depth_study
from analysis.studies.memory import MemoryStudy, memory_study
from analysis.studies.precision import compare_precision, measured_floors, precision_pairs
from analysis.studies.tables import IRTable, beta_vs_length, default_lengths, infrared_subwindow
from sweep.format.schema import SSM_KINDS
from sweep.format.variants import trained_models
from sweep.format.settings import MODES, Settings


def table_lengths(st, layer, lengths=None, always=None, settings=None):
    """Table I rows of one layer: `lengths`, else the settings' lengths, else 8, 16, …;
    `always` (the representative L) is added so the figures' L has a row of its own."""
    configured = lengths or (settings or store_settings(st)).lengths
    if configured and always is not None:
        configured = [*configured, always]
    return default_lengths(st.layer_length[layer], configured)


@dataclass
class ModelResult:
    """Everything `tdos analyze` measured for one model group."""
    name: str
    arch: str
    dtype: str
    layer: int                             # representative layer
    L: int                                 # representative length
    settings: Settings
    table: IRTable                         # Table I at the representative layer
    depth: IRTable                         # β across depth at L
    tables_by_layer: dict                  # {layer: IRTable}
    counts: dict                           # ledger: planned / done / flagged / pending
    special: dict                          # {modes: class counts at (layer, L)}
    threshold: float
    identity: dict                         # the store's record of the checkpoint
    inputs: dict                           # the store's record of what the tokens came from
    rate_range: dict                       # {modes: (min, max) stable rate at (layer, L)}
    scale_by_eigenvector: bool = False     # scale mode found by ρ_t, r_t (False: older store)
    shift_by_eigenvector: bool = False
    laws: MeasuredLaws | None = None       # None: β not fitted at (layer, L)
    sensitivity: dict = field(default_factory=dict)    # {modes: WindowSensitivity}
    outside_bins: dict = field(default_factory=dict)
    outside_bins_ssm: dict | None = None
    decay: dict | None = None              # the layer Figs 2–4 draw: kind, intrinsic/effective modes
    a_log_shift: dict | None = None
    precision: list = field(default_factory=list)      # PrecisionComparison.to_dict()s
    files: list = field(default_factory=list)
    stacks: DepthStudy | None = None       # stacked blocks (a store swept with `depth:`)
    memory: MemoryStudy | None = None      # token memory (a store swept with `memory:`)
    primary: object = None                 # settings.Primary: the β of headlines and verdicts
    why_layer: str = ""                    # the rule that picked the representative layer and L
    nulls: NullStudy | None = None         # its observables against its null models
    nulls_depth: DepthNullStudy | None = None   # β and mode density against them at every layer
    infrared: dict | None = None           # the primary count on the infrared sub-window

    @property
    def modes(self) -> str:
        return self.settings.modes

    def row(self):
        """The Table I row at the representative L."""
        return next((x for x in self.table.rows if x.L == self.L), self.table.rows[-1])

    def empty_window_line(self, modes) -> str | None:
        """One line when the window holds no mode of count `modes` at (layer, L), else None."""
        if self.row().by_mode[modes].fitted:
            return None
        lo, hi = self.settings.window
        a, b = self.rate_range[modes]
        where = f"its stable rates lie in [{a:.3g}, {b:.3g}]" if np.isfinite(a) else "no stable rates"
        return (f"the window [{lo:g}, {hi:g}] holds no {modes} modes at layer {self.layer}, "
                f"L = {self.L} ({where}): nothing fitted")


def analyze(store_path, out=None, settings=None, model=None, progress=True) -> dict:
    """Write the full analysis of `store_path` into `out`; return {model: ModelResult}.
    `settings` default: the store's recorded `analysis:` section."""
    store_path = os.fspath(store_path)
    out = Path(out or store_path.rstrip("/") + "-report")
    out.mkdir(parents=True, exist_ok=True)
    st0 = open_store(store_path, model)
    settings = settings or store_settings(st0)
    agg_all = aggregate(store_path, progress=None)
    # nulls are read under their trained model (studies/nulls.py), not as models of their own
    # and so are the members of a quantization ensemble (studies/ensemble.py)
    names = [st0.name] if model else trained_models(st0.root)
    results = {}
    floors = measured_floors({n: st0.model(n) for n in names})
    for name in names:
        sub = out / name if len(names) > 1 else out
        sub.mkdir(exist_ok=True)
        results[name] = analyze_model(st0.model(name), agg_all.model(name), sub, settings, progress,
                                      floors.get(name))
        _against_nulls(st0.model(name), agg_all, results[name], sub)
    extra_files = _precision_checks(store_path, names, results, out, settings)
    comparison = None
    nulls = {n: r.nulls for n, r in results.items() if r.nulls is not None}
    if len(names) > 1:
        # the null studies made above are the comparison's: each made once, counted once
        comparison = compare_models([f"{store_path}:{n}" for n in names], settings, nulls,
                                    f"tdos analyze of {len(names)} models")
        extra_files += write_comparison(comparison, out, markdown=False)
        family = comparison.family
    else:
        family = Family(f"tdos analyze of {names[0]}", {"models": 1, "comparisons against nulls "
                        "(observables × null kinds)": len(nulls[names[0]].comparisons) if nulls
                        else 0}, settings.level)
        tests = {n: ns.add_to(family) for n, ns in nulls.items()}
        family.correct()
        for n, ns in nulls.items():
            ns.take(tests[n], family.m)
    write_json(results, out / "fits.json", store_path, settings, comparison, family)
    write_report(results, out / "report.md", store_path, settings, extra_files,
                 None if comparison is None else comparison_markdown(comparison, heading_level=3),
                 family)
    add_ensembles({n: ensemble_study(st0.model(n), r.layer, r.L, r.settings, r.primary)
                   for n, r in results.items()}, out / "fits.json", out / "report.md")
    return results


def _against_nulls(st, agg_all, res, out) -> None:
    """The model's observables against its nulls, and the figure of its TDOS over their band."""
    s = res.settings
    res.nulls = null_study(st, res.layer, res.L, s, res.primary)
    if res.nulls is None:
        return
    if headline(res).power_law_rejected:       # a β test is then a test of a window slope
        for c in res.nulls.comparisons:
            if c.observable.startswith("β ("):
                c.observable = f"window slope {c.observable}"
    def agg_of(name):
        return agg_all.model(name).skipping(s.skip_positions)
    save(null_figure(agg_of, st, res.layer, res.L, res.primary.modes, s.window,
                     f"{st.name}, layer {res.layer}: trained TDOS over each null kind's band,\n"
                     f"all on the nulls' tokens (legend) [{res.primary.modes} modes]",
                     res.nulls.kinds), out / NULL_FIGURE)
    res.files.append(NULL_FIGURE)
    res.nulls_depth = depth_null_study(st, res.L, s, res.primary, headline(res).power_law_rejected)
    if res.nulls_depth is not None:
        save(nulls_depth_figure(res.nulls_depth, f"{st.name}: against its nulls across depth, "
                                f"on the nulls' tokens [{res.primary.modes} modes]"),
             out / NULLS_DEPTH_FIGURE)
        res.files.append(NULLS_DEPTH_FIGURE)


def analyze_model(st, agg, out, settings, progress=True, floors=None) -> ModelResult:
    """`floors`: {layer: (λ*, how)}, the fp32 resolution the precision study measured
    (studies/precision.measured_floors); the all-stable count leaves out the modes below it."""
    agg = agg.skipping(settings.skip_positions)
    layer, L = representative(st, settings=settings)
    tables, floors = {}, floors or {}
    for ly in tqdm(st.layers, desc=f"analyze {st.name}", unit="layer", disable=not progress):
        rows = table_lengths(st, ly, always=min(L, st.layer_length[ly]), settings=settings)
        tables[ly] = beta_vs_length(st, agg, ly, rows, settings, measured=floors.get(ly))
    res = ModelResult(
        st.name, st.arch, st.dtype, layer, L, settings, tables[layer], _depth_table(tables, st, L),
        tables, st.block_counts(), {m: agg.special(layer, L, m) for m in MODES}, agg.threshold,
        st.identity, st.inputs, {m: _rate_range(agg, layer, L, m) for m in MODES},
        agg.scale_by_eigenvector, agg.shift_by_eigenvector)
    res.primary = primary_of(st, settings)
    res.why_layer = why_representative(st, settings=settings)
    rows = token_rate_rows(st, layer, L, skip=settings.skip_positions)
    res.infrared = infrared_subwindow(*rows[res.primary.modes], settings)
    res.sensitivity = {m: window_sensitivity(*rows[m], settings.window, settings.n_boot,
                                             settings.level, settings.seed) for m in MODES}
    res.files = _model_figures(st, agg, res, out, rows)
    if st.depth:
        res.stacks = depth_study(st, settings)
        save(depth_figure(res.stacks, f"{st.name}: stacked blocks, layers {res.stacks.layers[0]}.."
                          f"{res.stacks.layers[1]}"), out / DEPTH_FIGURE)
        res.files.append(DEPTH_FIGURE)
    if st.group.attrs.get("memory"):
        res.memory = memory_study(st, settings)
        save(memory_figure(res.memory, f"{st.name}: token memory ({res.memory.meta['estimator']})"),
             out / MEMORY_FIGURE)
        res.files.append(MEMORY_FIGURE)
    res.table.to_csv(out / "table1.csv")
    (out / "table1.md").write_text(table_markdown(res) + "\n")
    res.files += ["table1.csv", "table1.md"]
    return res


def _rate_range(agg, layer, L, modes) -> tuple:
    """(lowest, highest) stable rate at (layer, L) to a bin: where the rates lie."""
    h = agg.hist(layer, L, modes=modes)
    nz = np.nonzero(h)[0]
    if not len(nz):
        return (np.nan, np.nan)
    lo_col, hi_col = nz[0], nz[-1]
    return (float(EDGES[max(lo_col - 1, 0)]), float(EDGES[min(hi_col, len(EDGES) - 1)]))


def _depth_table(tables, st, L):
    """β across depth at L (each layer's row at min(L, its length), or its longest row)."""
    rows, fits = [], {m: {} for m in MODES}
    for ly, t in tables.items():
        Lx = min(L, st.layer_length[ly])
        i = [r.L for r in t.rows].index(Lx) if Lx in [r.L for r in t.rows] else -1
        row = t.rows[i]
        rows.append(dataclasses.replace(row, key=ly))
        for m in MODES:
            fits[m][ly] = t.fits[m][row.L]
    first = next(iter(tables.values()))
    return IRTable(rows, "layer", first.window, first.level, fits, first.modes)


def _model_figures(st, agg, res, out, rows):
    """Every figure of one model; collective ones draw mode count res.modes and say so."""
    layer, L, modes, window = res.layer, res.L, res.modes, res.settings.window
    lengths = [r.L for r in res.table.rows]
    tag, mtag = f"{st.name}, layer {layer}", f"[{modes} modes]"
    files = []

    def put(fig, name):
        save(fig, out / name)
        files.append(name)

    sp = tdos(agg, layer, L, modes=modes)
    beta, gof_p = res.row().get("beta", modes), res.row().get("gof_p", modes)
    slope = "a window slope, " if np.isfinite(gof_p) and gof_p < 1 - res.settings.level else ""
    kernel = memory_kernel_from_hist(sp, beta=beta if np.isfinite(beta) else None,
                                     label=r"$K(t)=\langle e^{-\lambda t}\rangle$")
    kernel.beta_name = f"{slope}cumulative:{modes}, GOF p = {gof_p:.2g}"
    put(F.fig1_collective(complex_spectrum(st, layer, L), sp, kernel, f"{tag}, L = {L} {mtag}",
                          window), "fig1_collective_spectrum.png")
    ssm = _ssm_layer(st, layer)
    if ssm is not None:
        res.outside_bins_ssm, res.decay = _mamba_figures(st, agg, ssm, layer, lengths, put)
        if has_s4d_init(st, ssm):
            res.a_log_shift = a_log_shift(st.a_log(ssm))
    by_length = tdos_vs_length(agg, layer, lengths, modes)
    put(F.fig_family(by_length, f"{tag}: ρ_block vs L {mtag}", ylabel="ρ_block(λ)", window=window),
        "fig5_tdos_vs_length.png")
    by_depth = tdos_vs_depth(agg, st.layers, L, modes)
    put(F.fig_family(by_depth, f"{st.name}: ρ_block across depth, L = {L} {mtag}",
                     ylabel="ρ_block(λ)", window=window), "fig6_tdos_vs_depth.png")
    p = res.primary
    diag = "" if p.name == f"cumulative:{modes}" else f"; a diagnostic, the primary is {p.name}"
    put(F.fig7_cumulative(res.table, f"{tag}: cumulative N(<λ) and fits\n[cumulative:{modes}{diag}]"),
        "fig7_cumulative_fits.png")
    put(F.fig_beta(res.table, f"{tag}: primary β vs L\n[{p.name}]",
                   reference(st.identity, layer, res.settings) or None, p), "fig8_beta_vs_length.png")
    put(F.fig_beta(res.depth, f"{st.name}: primary β across depth, L = {L}\n[{p.name}]", primary=p),
        "beta_vs_depth.png")
    gof = power_law_gof(rows[modes][0][np.isfinite(rows[modes][0])], window,
                        n_sims=res.settings.n_boot, seed=res.settings.seed)
    put(F.fig_window(res.sensitivity[modes], gof, f"{tag}, L = {L}: is it a power law? {mtag}"),
        "window_sensitivity.png")
    res.laws = measured_laws(st, agg, layer, L, res.row(), res.settings)
    if res.laws is not None:
        put(F.fig_self_averaging(res.laws.self_averaging, res.laws.resolution,
                                 f"{tag}: self-averaging (App. B) [{modes} modes, cumulative β]", res.laws.kernel),
            "self_averaging.png")
    res.outside_bins = {"block_vs_L": by_length.outside, "block_vs_depth": by_depth.outside}
    return files


def _ssm_layer(st, layer) -> int | None:
    """The swept layer with a learned decay (Mamba-style, gated delta rule) that Figs 2–4 draw:
    `layer` itself, else the nearest one; None when the model has no such swept layer (Figs
    2–4 apply to those alone)."""
    swept = [ly for ly in st.layers if ly in st.ssm_layers]
    return min(swept, key=lambda ly: (abs(ly - layer), ly)) if swept else None


def _mamba_figures(st, agg, layer, representative, lengths, put) -> tuple[dict, dict]:
    """Figs 2–4 (intrinsic and effective rates: no mode count applies) of layer `layer`, which
    has a learned decay; returns the counts beyond the bins and what the rates are."""
    kind = st.layer_kind(layer)
    part = next(p for p in kind.split("+") if p in SSM_KINDS)
    modes_of = "every A_log mode" if part == "mamba" else "one A per head"
    which = (f"layer {layer} ({kind})" if layer == representative else
             f"layer {layer} ({kind}: the layer with a decay nearest the representative layer "
             f"{representative}, a {st.layer_kind(representative)} layer)")
    lam_a = st.intrinsic_rates(layer)
    sp_int = intrinsic_spectrum(st, layer)
    put(F.fig2_intrinsic(a_log_distribution(st, layer), sp_int,
                         memory_kernel(lam_a, t=np.geomspace(1e-6, 1e7, 120), label=r"$K_A(t)$"),
                         f"{st.name}: intrinsic SSM spectrum, {which} ({modes_of})"),
        "fig2_intrinsic.png")
    by_layer = intrinsic_by_layer(st)
    n = len(st.ssm_layers)
    put(F.fig_family(by_layer, f"{st.name}: ρ_int across its {n} layers with a decay"
                     + (f" of {st.n_model_layers}" if n < st.n_model_layers else "")
                     + f" ({modes_of})", ylabel="ρ_int(λ_A)"), "fig3_intrinsic_all_layers.png")
    eff, dlt = effective_vs_length(agg, layer, lengths)
    put(F.fig4_effective(eff, dlt, f"{st.name}, {which}: selective dynamics vs L "
                         f"(every Δ_t·λ_A mode)"), "fig4_effective_vs_length.png")
    width = st.delta_channels(layer)
    per = ("(channel, state)" if part == "mamba" else "head" if width == lam_a.size
           else "key channel of each head")
    decay = {"layer": layer, "kind": kind, "intrinsic": f"exp(A_log), {modes_of}",
             "n_intrinsic": int(lam_a.size), "delta_channels": width,
             "effective": f"Δ_t·exp(A_log) per token and {per}"}
    return ({"intrinsic_by_layer": by_layer.outside, "effective_vs_L": eff.outside,
             "delta_vs_L": dlt.outside,
             "intrinsic_min_max": [float(lam_a.min()), float(lam_a.max())]}, decay)


def _precision_checks(store_path, names, results, out, settings):
    """One checkpoint in two dtypes: the fp32-vs-fp64 check (figures, then each result's
    `precision` list)."""
    files = []
    if len(names) < 2:
        return files
    stores = {n: open_store(store_path, n) for n in names}
    for ref, other, layer in precision_pairs(stores):
        lengths = [r.L for r in results[ref].tables_by_layer[layer].rows]
        cmp = compare_precision(store_path, None, ref, other, layer=layer, lengths=lengths,
                                window=settings.window, modes=settings.modes,
                                skip=settings.skip_positions)
        name = f"precision_{other}_vs_{ref}.png"
        save(F.fig_precision(cmp, f"{other} ({cmp.dtypes[1]}) vs {ref} ({cmp.dtypes[0]}), layer "
                             f"{layer} [{settings.modes} modes]"), out / name)
        files.append(name)
        for n in (ref, other):
            results[n].precision.append(cmp.to_dict())
    return files
