"""The learned decay's spectra (Mamba-style layers, the gated delta rule): A_log against its
initialisation, the intrinsic rates λ_A = exp(A_log) of every layer, the effective rates
Δ_t·λ_A and the selective step Δ_t against L (Figs 2–4)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis._plot import axes_or_new
from analysis.spectrum.observables import Spectrum, SpectrumFamily
from analysis.spectrum.rates import histogram

@dataclass
class ValueHistogram:
    """A plain histogram of parameter values (e.g. A_log), optionally beside the values they
    were initialised to (`reference`, same shape, drawn as an outline) and a `note`."""
    values: np.ndarray = field(repr=False)
    xlabel: str = ""
    reference: np.ndarray | None = field(default=None, repr=False)
    reference_label: str = ""
    note: str = ""

    def plot(self, ax=None, bins=60, color="C2"):
        ax = axes_or_new(ax)
        both = self.values if self.reference is None else np.concatenate([self.values, self.reference])
        edges = np.histogram_bin_edges(both, bins=bins)
        ax.hist(self.values, bins=edges, color=color, label="learned")
        if self.reference is not None:
            ax.hist(self.reference, bins=edges, histtype="step", color="k", lw=1.0,
                    label=self.reference_label)
            ax.legend(fontsize=7, loc="upper right")
        if self.note:  # headroom above the bars for the note and the legend
            ax.set_ylim(0, ax.get_ylim()[1] * 1.45)
            ax.text(0.03, 0.97, self.note, transform=ax.transAxes, fontsize=7, va="top",
                    bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"})
        ax.set_xlabel(self.xlabel), ax.set_ylabel("parameters")
        return ax


def s4d_real_init(a_log: np.ndarray) -> np.ndarray:
    """The A_log a Mamba-1 layer starts from (S4D-real, the default of transformers and
    mamba_ssm): log(n + 1) for state n, the same for every channel and every seed."""
    return np.broadcast_to(np.log(np.arange(1, a_log.shape[-1] + 1, dtype=np.float64)), a_log.shape)


def a_log_shift(a_log: np.ndarray, init: np.ndarray | None = None) -> dict:
    """How far training moved A_log from its initialisation (S4D-real unless `init` given).

    moved: fraction of entries with |ΔA_log| > 0.1 (a 10 % change of the rate λ_A);
    ks: two-sample Kolmogorov–Smirnov distance between the initial and learned value sets
    (the init is a set of atoms, so KS registers even small moves: `moved` is the robust one).
    """
    a_log = np.asarray(a_log)
    a = a_log.astype(np.float64).ravel()
    reference = "S4D-real init" if init is None else "given"
    if init is None:  # rounded as the weights are: an untouched float32 A_log has KS 0
        init = s4d_real_init(a_log).astype(a_log.dtype if a_log.dtype.kind == "f" else np.float64)
    init = np.asarray(init, dtype=np.float64).ravel()
    delta = np.abs(a - init)
    both = np.concatenate([a, init])
    cdf = [np.searchsorted(np.sort(v), both, side="right") / v.size for v in (init, a)]
    return {"entries": int(a.size), "moved": float((delta > 0.1).mean()),
            "median_abs_delta": float(np.median(delta)), "max_abs_delta": float(delta.max()),
            "ks": float(np.abs(cdf[0] - cdf[1]).max()), "reference": reference}


# architectures whose Mamba-style layers start from the S4D-real A_log = log(1 … N) (per
# head for Mamba-2), so that "moved from init" is a fact about training; others (Jamba,
# Bamba, Zamba2, Falcon-H1 …) initialise A_log their own ways
S4D_INIT_ARCHS = {"mamba": "mamba", "falcon_mamba": "mamba", "mamba2": "mamba2"}


def has_s4d_init(store, layer) -> bool:
    return S4D_INIT_ARCHS.get(store.arch) == store.layer_kind(layer).split("+")[0]


def a_log_distribution(store, layer) -> ValueHistogram:
    """A layer's A_log, beside its S4D-real initialisation with the shift between them where
    the architecture starts from it."""
    a_log = store.a_log(layer)
    if not has_s4d_init(store, layer):
        return ValueHistogram(a_log.ravel(), "A_log  (λ_A = exp A_log)")
    shift = a_log_shift(a_log)
    note = (f"vs S4D-real init (log 1 … log {a_log.shape[-1]}):\n"
            f"{shift['moved']:.0%} of {shift['entries']:,} moved |ΔA_log| > 0.1\n"
            f"median |ΔA_log| {shift['median_abs_delta']:.3f}, KS {shift['ks']:.2f}")
    return ValueHistogram(a_log.ravel(), "A_log  (λ_A = exp A_log)",
                          reference=s4d_real_init(a_log).ravel(),
                          reference_label="S4D-real init", note=note)


def intrinsic_spectrum(store, layer) -> Spectrum:
    """ρ_int(λ_A) of one layer (any model layer: A_log is stored for all)."""
    return Spectrum(histogram(store.intrinsic_rates(layer)), label=f"layer {layer}",
                    xlabel="intrinsic rate λ_A = exp(A_log)  (SSM time units)")


def intrinsic_by_layer(store, layers=None) -> SpectrumFamily:
    """ρ_int of every Mamba-style layer (default), swept or not."""
    layers = store.ssm_layers if layers is None else layers
    return SpectrumFamily([intrinsic_spectrum(store, l) for l in layers], list(layers), "layer")


def effective_spectrum(agg, layer, L=None) -> Spectrum:
    return Spectrum(agg.hist(layer, L, "eff"), label=f"L = {L}",
                    xlabel="effective rate λ_eff = Δ_t·λ_A  (per token)")


def delta_distribution(agg, layer, L=None) -> Spectrum:
    return Spectrum(agg.hist(layer, L, "delta"), label=f"L = {L}", xlabel="selective step Δ_t")


def effective_vs_length(agg, layer, lengths):
    return (SpectrumFamily([effective_spectrum(agg, layer, L) for L in lengths], list(lengths)),
            SpectrumFamily([delta_distribution(agg, layer, L) for L in lengths], list(lengths)))
