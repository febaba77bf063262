"""`tdos analyze`: every figure, Table I, a JSON of every fitted number, one markdown report."""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from . import figures as F
from ._plot import save
from .aggregate import aggregate
from .fits import WINDOW
from .observables import (a_log_distribution, a_log_shift, complex_spectrum, effective_vs_length,
                          intrinsic_by_layer, intrinsic_spectrum, memory_kernel,
                          memory_kernel_from_hist, tdos, tdos_vs_depth, tdos_vs_length)
from .precision import compare_precision, precision_pairs
from .report_md import symmetry_sentences, table_markdown, write_report
from .rates import DEFAULT_MODES, MODES, SCALE_RESIDUAL_MAX, check_modes
from .uncertainty import measured_laws
from .store import open_store
from .tables import PAPER_BETA, IRTable, beta_vs_length, default_lengths


def analysis_settings(st) -> dict:
    """The config's `analysis:` section as the sweep recorded it ({} when absent)."""
    return dict(st.root.attrs.get("analysis") or {})


def representative(st, layer=None):
    """A stored layer: `layer` (else the config's analysis.layer) when the store holds it,
    else 24 (the paper's) when stored, else the middle stored layer; L = 128 or its max."""
    wanted = layer if layer is not None else analysis_settings(st).get("layer")
    if wanted is not None and int(wanted) in st.layers:
        layer = int(wanted)
    else:
        layer = 24 if 24 in st.layers else st.layers[len(st.layers) // 2]
    return layer, min(128, st.layer_length[layer])


@dataclass
class ModelResult:
    name: str
    arch: str
    dtype: str
    layer: int
    L: int
    table: IRTable
    depth: IRTable
    counts: dict
    special: dict                          # {modes: class counts at (layer, L)}
    threshold: float
    scale_by_eigenvector: bool = False     # scale mode found by ρ_t, r_t (False: older store)
    files: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    modes: str = DEFAULT_MODES             # the count the figures draw (tables carry both)

    def row(self):
        """The Table I row at the representative L."""
        return next((x for x in self.table.rows if x.L == self.L), self.table.rows[-1])


def analyze(store_path, out=None, window=WINDOW, model=None, n_boot=500, level=0.9, seed=0,
            progress=True, modes=DEFAULT_MODES, lengths=None, layer=None) -> dict:
    """Write the full analysis of `store_path` into `out`; return {model: ModelResult}.

    `modes` picks the count figures draw; `lengths` (Table I rows) and `layer` (the
    representative layer) default to the config's `analysis:` section, then to 8, 16, …
    and layer 24 / the middle stored layer."""
    check_modes(modes)
    store_path = os.fspath(store_path)
    out = Path(out or store_path.rstrip("/") + "-report")
    out.mkdir(parents=True, exist_ok=True)
    st0 = open_store(store_path, model)
    agg_all = aggregate(store_path, progress=None)
    names = [st0.name] if model else st0.models
    results = {}
    for name in names:
        sub = out / name if len(names) > 1 else out
        sub.mkdir(exist_ok=True)
        results[name] = analyze_model(st0.model(name), agg_all.model(name), sub, tuple(window),
                                      n_boot, level, seed, progress, modes, lengths, layer)
    extra_files = _compare_models(store_path, names, results, out, tuple(window), modes)
    write_json(results, out / "fits.json", store_path, window)
    write_report(results, out / "report.md", store_path, window, extra_files, out)
    return results


def table_lengths(st, layer, lengths=None, always=None):
    """Table I rows of one layer: `lengths`, else the config's analysis.lengths, else 8, 16, …;
    `always` (the representative L) is added so the figures' L has a row of its own."""
    configured = lengths or analysis_settings(st).get("lengths")
    if configured and always is not None:
        configured = [*configured, always]
    return default_lengths(st.layer_length[layer], configured)


def analyze_model(st, agg, out, window, n_boot, level, seed, progress, modes=DEFAULT_MODES,
                  lengths=None, layer=None) -> ModelResult:
    layer, L = representative(st, layer)
    tables = {}
    for ly in tqdm(st.layers, desc=f"analyze {st.name}", unit="layer", disable=not progress):
        rows = table_lengths(st, ly, lengths, always=min(L, st.layer_length[ly]))
        tables[ly] = beta_vs_length(st, agg, ly, rows, window, n_boot, level, seed, modes)
    depth = _depth_table(tables, st, L)
    res = ModelResult(st.name, st.arch, st.dtype, layer, L, tables[layer], depth,
                      st.block_counts(), {m: agg.special(layer, L, m) for m in MODES},
                      agg.threshold, agg.scale_by_eigenvector, modes=modes)
    res.extra["tables_by_layer"] = {ly: t.to_dicts() for ly, t in tables.items()}
    res.extra["shift_by_eigenvector"] = agg.shift_by_eigenvector
    res.extra["inputs"] = st.inputs        # the store's record of what the tokens came from
    res.files = _model_figures(st, agg, res, out, window, n_boot, level, seed)
    res.table.to_csv(out / "table1.csv")
    (out / "table1.md").write_text(table_markdown(res) + "\n")
    res.files += ["table1.csv", "table1.md"]
    return res


def _depth_table(tables, st, L):
    """β across depth at L (each layer's row at min(L, its length), or its longest row)."""
    rows, fits = [], {m: {} for m in MODES}
    for ly, t in tables.items():
        Lx = min(L, st.layer_length[ly])
        i = [r.L for r in t.rows].index(Lx) if Lx in [r.L for r in t.rows] else -1
        row = t.rows[i]
        rows.append(type(row)(**{**asdict(row), "key": ly}))
        for m in MODES:
            fits[m][ly] = t.fits[m][row.L]
    first = next(iter(tables.values()))
    return IRTable(rows, "layer", first.window, first.level, fits, first.modes)


def _model_figures(st, agg, res, out, window, n_boot, level, seed):
    """Every figure of one model; collective ones draw mode count res.modes and say so."""
    layer, L, modes = res.layer, res.L, res.modes
    lengths = [r.L for r in res.table.rows]
    tag = f"{st.name}, layer {layer}"
    mtag = f"[{modes} modes]"
    files = []

    def put(fig, name):
        save(fig, out / name)
        files.append(name)

    sp = tdos(agg, layer, L, modes=modes)
    beta = res.row().get("beta", modes)
    kernel = memory_kernel_from_hist(sp, beta=beta, label=r"$K(t)=\langle e^{-\lambda t}\rangle$")
    put(F.fig1_collective(complex_spectrum(st, layer, L), sp, kernel, f"{tag}, L = {L} {mtag}"),
        "fig1_collective_spectrum.png")
    if st.is_mamba:
        res.extra["outside_bins_ssm"] = _mamba_figures(st, agg, layer, lengths, tag, put)
        res.extra["a_log_shift"] = a_log_shift(st.a_log(layer))
    by_length = tdos_vs_length(agg, layer, lengths, modes)
    put(F.fig_family(by_length, f"{tag}: ρ_block vs L {mtag}",
                     ylabel="ρ_block(λ)", window=window), "fig5_tdos_vs_length.png")
    by_depth = tdos_vs_depth(agg, st.layers, L, modes)
    put(F.fig_family(by_depth, f"{st.name}: ρ_block across depth, L = {L} {mtag}",
                     ylabel="ρ_block(λ)", window=window), "fig6_tdos_vs_depth.png")
    put(F.fig7_cumulative(res.table, f"{tag}: cumulative N(<λ) and fits {mtag}"),
        "fig7_cumulative_fits.png")
    ref = PAPER_BETA if st.is_mamba else None
    put(F.fig_beta(res.table, f"{tag}: infrared exponent vs L {mtag}", ref), "fig8_beta_vs_length.png")
    put(F.fig_beta(res.depth, f"{st.name}: β across depth, L = {L} {mtag}"), "beta_vs_depth.png")
    laws = measured_laws(st, agg, layer, L, res.row(), modes, n_boot=n_boot, level=level, seed=seed)
    put(F.fig_self_averaging(laws.self_averaging, laws.resolution,
                             f"{tag}: self-averaging (App. B) {mtag}", laws.kernel), "self_averaging.png")
    res.extra["outside_bins"] = {"block_vs_L": by_length.outside, "block_vs_depth": by_depth.outside}
    res.extra["laws"] = laws.to_dict()
    return files


def _mamba_figures(st, agg, layer, lengths, tag, put) -> dict:
    """Figs 2–4 (SSM rates: no mode count applies); returns the counts beyond the bins."""
    lam_a = st.intrinsic_rates(layer)
    sp_int = intrinsic_spectrum(st, layer)
    put(F.fig2_intrinsic(a_log_distribution(st, layer), sp_int,
                         memory_kernel(lam_a, t=np.geomspace(1e-6, 1e7, 120), label=r"$K_A(t)$"),
                         f"{st.name}: intrinsic SSM spectrum, layer {layer} (every A_log mode)"),
        "fig2_intrinsic.png")
    by_layer = intrinsic_by_layer(st)
    put(F.fig_family(by_layer, f"{st.name}: ρ_int across all {st.n_model_layers} layers "
                     f"(every A_log mode)", ylabel="ρ_int(λ_A)"), "fig3_intrinsic_all_layers.png")
    eff, dlt = effective_vs_length(agg, layer, lengths)
    put(F.fig4_effective(eff, dlt, f"{tag}: selective dynamics vs L (every Δ_t·λ_A mode)"),
        "fig4_effective_vs_length.png")
    return {"intrinsic_by_layer": by_layer.outside, "effective_vs_L": eff.outside,
            "delta_vs_L": dlt.outside, "intrinsic_min_max": [float(lam_a.min()), float(lam_a.max())]}


def _compare_models(store_path, names, results, out, window, modes=DEFAULT_MODES):
    """Several models: β vs L side by side; one checkpoint in two dtypes: the precision check."""
    files = []
    if len(names) < 2:
        return files
    save(F.fig_models_beta({n: r.table for n, r in results.items()}, f"β vs L across models "
                           f"[{modes} modes]", modes), out / "models_beta.png")
    files.append("models_beta.png")
    stores = {n: open_store(store_path, n) for n in names}
    for ref, other, layer in precision_pairs(stores):
        lengths = [r["L"] for r in results[ref].extra["tables_by_layer"][layer]]
        cmp = compare_precision(store_path, None, ref, other, layer=layer, lengths=lengths,
                                window=window, modes=modes)
        name = f"precision_{other}_vs_{ref}.png"
        save(F.fig_precision(cmp, f"{other} ({cmp.dtypes[1]}) vs {ref} ({cmp.dtypes[0]}), layer "
                             f"{layer} [{modes} modes]"), out / name)
        files.append(name)
        for n in (ref, other):
            results[n].extra.setdefault("precision", []).append(cmp.to_dict())
    return files


def _clean(o):
    """JSON-safe: NaN/inf → null, numpy scalars → Python."""
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, (np.floating, float)):
        return float(o) if math.isfinite(o) else None
    if isinstance(o, np.integer):
        return int(o)
    return o


def write_json(results, path, store_path, window):
    doc = {"store": os.path.abspath(store_path), "window": list(window), "models": {}}
    for name, r in results.items():
        doc["models"][name] = {
            "arch": r.arch, "dtype": r.dtype, "layer": r.layer, "L": r.L,
            "marginal_threshold": r.threshold, "scale_by_eigenvector": r.scale_by_eigenvector,
            "scale_residual_max": SCALE_RESIDUAL_MAX, "blocks": r.counts,
            "mode_counts": {"all-stable": "every eigenvalue with 0 < |ζ| < 1, nothing removed "
                            "(the paper's count)", "symmetry-removed": "also drops each token's "
                            "norm-invariant-direction modes and |λ| below the marginal threshold"},
            "modes_drawn": r.modes, "modes": r.special, "symmetry_modes": symmetry_sentences(r, window),
            "table1": r.table.to_dicts(), "beta_vs_depth": r.depth.to_dicts(), **r.extra}
    path.write_text(json.dumps(_clean(doc), indent=1))
    return path
