"""tdos analysis: reads only the store (and its aggregate beside it). See docs/api.md."""
from .aggregate import Aggregate, aggregate
from .alternatives import Alternative, compare_alternatives
from .bootstrap import BootstrapIR, bootstrap_ir_exponent, bootstrap_ir_from_hists
from .compare import Comparison, DeltaBeta, compare_models
from .fits import IRFit, MLEFit, fit_ir_exponent, fit_ir_from_hist, mle_ir_exponent
from .gof import PowerLawGOF, power_law_gof
from .observables import (ComplexSpectrum, MemoryKernel, Spectrum, SpectrumFamily,
                          a_log_distribution, block_rates, complex_spectrum, delta_distribution,
                          effective_spectrum, effective_vs_length, intrinsic_by_layer,
                          intrinsic_spectrum, memory_kernel, memory_kernel_from_hist, tdos,
                          tdos_from_rates, tdos_vs_depth, tdos_vs_length)
from .precision import PrecisionComparison, compare_precision, match_tokens
from .rates import MODES, classify, classify_rows, marginal_threshold, rates_of
from .selfavg import ir_resolution, self_averaging
from .settings import Settings, SettingsError
from .store import Store, StoreError, open_store
from .tables import IRTable, beta_vs_depth, beta_vs_length
from .window import (LocalExponent, MLEInterval, WindowSensitivity, bootstrap_mle, local_exponent,
                     window_sensitivity)

__all__ = [
    "Aggregate", "aggregate", "IRFit", "BootstrapIR", "MLEFit", "bootstrap_ir_exponent",
    "bootstrap_ir_from_hists", "fit_ir_exponent", "fit_ir_from_hist", "mle_ir_exponent",
    "ComplexSpectrum", "MemoryKernel", "Spectrum", "SpectrumFamily", "a_log_distribution",
    "block_rates", "complex_spectrum", "delta_distribution", "effective_spectrum",
    "effective_vs_length", "intrinsic_by_layer", "intrinsic_spectrum", "memory_kernel",
    "memory_kernel_from_hist", "tdos", "tdos_from_rates", "tdos_vs_depth", "tdos_vs_length",
    "classify", "classify_rows", "marginal_threshold", "rates_of", "MODES", "compare_precision",
    "PrecisionComparison", "match_tokens", "self_averaging",
    "ir_resolution", "Store", "StoreError", "open_store", "IRTable", "beta_vs_depth",
    "beta_vs_length", "Alternative", "compare_alternatives", "Comparison", "DeltaBeta",
    "compare_models", "PowerLawGOF", "power_law_gof", "Settings", "SettingsError", "LocalExponent",
    "MLEInterval", "WindowSensitivity", "bootstrap_mle", "local_exponent", "window_sensitivity",
]
