"""tdos analysis: reads only the store. Rooms, each importing only the ones above it:

    _plot       the figures' shared axes and saving
    spectrum/   rates of a block's eigenvalues under a mode count; TDOS, K(t), Δ_t, A_log
    io/         the store's reader and the incremental aggregate beside it (the store's
                declaration, ledger and the analysis settings are the store format's:
                sweep/format/, the one room of sweep that analysis imports)
    fit/        β by least squares and bounded MLE, windows, goodness of fit, resampling CIs
    laws/       App. B self-averaging and K(t) laws with their uncertainty
    studies/    Table I and β against depth, the primary β of a store (`st.beta`, the
                report's headline), fp32 vs fp64, two models compared, stacked blocks
                (depth), token memory, nulls and the quantization ensemble
    measure/    `analysis.measure.measure(store, settings) -> Analysis`: the registry of
                studies, run once, one immutable result
    report/     `render(analysis, out)`: figures, report.md, fits.json, compare.md, computing
                nothing; `analyze` = measure, then render
    views/      the live view during a sweep, the summary after it
    cli         `tdos analyze` / `tdos compare`

Names load lazily (PEP 562): importing `analysis` brings in neither matplotlib nor scipy.
See ARCHITECTURE.md.
"""
import importlib

_EXPORTS = {
    "io.aggregate": ["Aggregate", "aggregate"],
    "fit.alternatives": ["Alternative", "compare_alternatives"],
    "fit.bootstrap": ["BootstrapIR", "bootstrap_ir_exponent", "bootstrap_ir_from_hists"],
    "studies.compare": ["Comparison", "DeltaBeta", "compare_models"],
    "studies.depth": ["DepthStudy", "depth_study"],
    "fit.fits": ["IRFit", "MLEFit", "fit_ir_exponent", "fit_ir_from_hist", "mle_ir_exponent"],
    "fit.gof": ["PowerLawGOF", "power_law_gof"],
    "studies.memory": ["MemoryProfile", "memory_profile"],
    "studies.memory_laws": ["MemoryFit", "fit_memory"],
    "spectrum.observables": ["ComplexSpectrum", "MemoryKernel", "Spectrum", "SpectrumFamily",
                             "block_rates", "complex_spectrum", "memory_kernel",
                             "memory_kernel_from_hist", "tdos", "tdos_from_rates",
                             "tdos_vs_depth", "tdos_vs_length"],
    "spectrum.decay": ["a_log_distribution", "delta_distribution", "effective_spectrum",
                       "effective_vs_length", "intrinsic_by_layer", "intrinsic_spectrum"],
    "studies.precision": ["PrecisionComparison", "compare_precision", "match_tokens"],
    "spectrum.rates": ["classify", "classify_rows", "marginal_threshold", "rates_of"],
    "laws.selfavg": ["ir_resolution", "self_averaging"],
    "sweep.format.settings": ["MODES", "Settings", "SettingsError"],   # the analysis section
    "io.store": ["Store", "StoreError", "open_store"],
    "studies.tables": ["IRTable", "beta_vs_depth", "beta_vs_length"],
    "studies.primary": ["Headline", "primary_beta", "representative"],
    "fit.window": ["LocalExponent", "MLEInterval", "WindowSensitivity", "bootstrap_mle",
                   "local_exponent", "window_sensitivity"],
    "measure.analysis": ["Analysis", "ModelAnalysis"],
    "studies.ensemble": ["EnsembleDepth", "EnsembleStudy", "ensemble_across_depth",
                         "ensemble_study"],
    "studies.nulls": ["NullComparison", "NullStudy", "null_study"],
    "studies.nulls_depth": ["DepthNullStudy", "depth_null_study"],
    "report.render": ["render"],
    "report.analyze": ["analyze"],
    "fit.enough": ["MINIMUMS", "enough", "format_estimate"],
    "studies.study": ["StudyResult", "declared_study"],
    "studies.study_section": ["StudySection", "measure_study"],
    "studies.shape": ["DensityShape", "density_shape"],
    "studies.positions": ["PositionBins", "beta_by_position", "bos_rule"],
    "studies.precision_study": ["PrecisionStudy", "precision_study"],
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name):
    if name in _WHERE:
        where = _WHERE[name]
        module = where if where.startswith("sweep.") else f"{__name__}.{where}"
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
