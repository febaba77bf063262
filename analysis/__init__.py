"""tdos analysis: reads only the store (and its aggregate beside it). See docs/api.md.

Names load lazily (PEP 562): `from analysis import schema` — what every sweep worker imports
to write a store — brings in neither matplotlib nor scipy.
"""
import importlib

# the function `aggregate` shares its name with its module: bound now, as the submodule's
# first import would otherwise leave the module under that name (it needs no scipy)
from .aggregate import Aggregate, aggregate  # noqa: E402

_EXPORTS = {
    "alternatives": ["Alternative", "compare_alternatives"],
    "bootstrap": ["BootstrapIR", "bootstrap_ir_exponent", "bootstrap_ir_from_hists"],
    "compare": ["Comparison", "DeltaBeta", "compare_models"],
    "depth": ["DepthStudy", "depth_study"],
    "fits": ["IRFit", "MLEFit", "fit_ir_exponent", "fit_ir_from_hist", "mle_ir_exponent"],
    "gof": ["PowerLawGOF", "power_law_gof"],
    "memory": ["MemoryFit", "MemoryProfile", "fit_memory", "memory_profile"],
    "observables": ["ComplexSpectrum", "MemoryKernel", "Spectrum", "SpectrumFamily",
                    "a_log_distribution", "block_rates", "complex_spectrum", "delta_distribution",
                    "effective_spectrum", "effective_vs_length", "intrinsic_by_layer",
                    "intrinsic_spectrum", "memory_kernel", "memory_kernel_from_hist", "tdos",
                    "tdos_from_rates", "tdos_vs_depth", "tdos_vs_length"],
    "precision": ["PrecisionComparison", "compare_precision", "match_tokens"],
    "rates": ["MODES", "classify", "classify_rows", "marginal_threshold", "rates_of"],
    "selfavg": ["ir_resolution", "self_averaging"],
    "settings": ["Settings", "SettingsError"],
    "store": ["Store", "StoreError", "open_store"],
    "tables": ["IRTable", "beta_vs_depth", "beta_vs_length"],
    "window": ["LocalExponent", "MLEInterval", "WindowSensitivity", "bootstrap_mle",
               "local_exponent", "window_sensitivity"],
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted([*_WHERE, "Aggregate", "aggregate"])


def __getattr__(name):
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
