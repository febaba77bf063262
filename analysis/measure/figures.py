"""What the figures of one model draw, measured: the spectra, kernels and goodness of fit of
Figs 1–6 and the window figure, Figs 2–4's intrinsic and effective rates, and the null bands.
Each is a registered model study (analysis/measure/registry.py); the figures themselves are
drawn by render from these objects alone (analysis/report/figures.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.fit.gof import power_law_gof
from analysis.spectrum.decay import (a_log_distribution, a_log_shift, effective_vs_length,
                                     has_s4d_init, intrinsic_by_layer, intrinsic_spectrum)
from analysis.spectrum.observables import (complex_spectrum, memory_kernel,
                                           memory_kernel_from_hist, tdos, tdos_vs_depth,
                                           tdos_vs_length)
from sweep.format.schema import SSM_KINDS


@dataclass(frozen=True)
class Spectra:
    """Fig 1 (ζ plane, ρ_block, K(t)), Figs 5–6 (ρ_block against L and depth) and the window
    figure's goodness of fit, all of the figures' mode count at the representative (layer, L)."""
    complex: object                # ComplexSpectrum of J_tt's eigenvalues
    tdos: object                   # Spectrum ρ_block
    kernel: object                 # MemoryKernel K(t), with the β it is read against
    by_length: object              # SpectrumFamily over the Table I lengths
    by_depth: object               # SpectrumFamily over the swept layers at L
    gof: object                    # PowerLawGOF of the in-window rates

    @property
    def outside_bins(self) -> dict:
        return {"block_vs_L": self.by_length.outside, "block_vs_depth": self.by_depth.outside}


def spectra(m) -> Spectra:
    """The spectra Figs 1, 5, 6 and the window figure draw (ModelContext `m`)."""
    st, agg, s = m.st, m.agg, m.settings
    layer, L, modes = m.layer, m.L, s.modes
    table = m.results["tables"][layer]
    sp = tdos(agg, layer, L, modes=modes)
    # the reference slope beside K(t) is the headline's β, said as what it is
    h = m.results["headline"]
    what = "a window slope" if h.power_law_rejected else "an exponent"
    kernel = memory_kernel_from_hist(sp, beta=h.beta if h.fitted else None,
                                     label=r"$K(t)=\langle e^{-\lambda t}\rangle$" + f" [{modes}]",
                                     beta_name=f"the headline β, {h.name}:\n{what}, "
                                               f"GOF p = {h.gof_p:.2g}")
    rates = m.rows[modes][0]
    return Spectra(complex_spectrum(st, layer, L), sp, kernel,
                   tdos_vs_length(agg, layer, [r.L for r in table.rows], modes),
                   tdos_vs_depth(agg, st.layers, L, modes),
                   power_law_gof(rates[np.isfinite(rates)], s.window, n_sims=s.n_boot, seed=s.seed))


@dataclass(frozen=True)
class Decay:
    """Figs 2–4 of the swept layer with a learned decay nearest the representative one: the
    A_log distribution, ρ_int and K_A(t), ρ_int of every such layer, ρ_eff and Δ_t against L."""
    layer: int
    representative: int
    kind: str                      # the layer's kind ("mamba", "mamba2+attention", …)
    representative_kind: str
    modes_of: str                  # what one intrinsic rate is: "every A_log mode" | "one A per head"
    a_log: object                  # ValueHistogram of A_log
    intrinsic: object              # Spectrum of λ_A = exp(A_log)
    kernel_a: object               # MemoryKernel K_A(t)
    by_layer: object               # SpectrumFamily of ρ_int over the model's decay layers
    n_decay_layers: int
    n_model_layers: int
    effective: object              # SpectrumFamily of ρ_eff over L
    delta: object                  # SpectrumFamily of Δ_t over L
    info: dict                     # fits.json `decay`: layer, kind, what the rates count
    outside_bins: dict             # fits.json `outside_bins_ssm`
    a_log_shift: dict | None       # A_log against its S4D-real initialisation (Mamba-1)


def decay(m) -> Decay | None:
    """Figs 2–4's data; None when the model has no swept layer with a learned decay."""
    st, layer = m.st, m.layer
    swept = [ly for ly in st.layers if ly in st.ssm_layers]
    if not swept:
        return None
    ssm = min(swept, key=lambda ly: (abs(ly - layer), ly))
    kind = st.layer_kind(ssm)
    part = next(p for p in kind.split("+") if p in SSM_KINDS)
    modes_of = "every A_log mode" if part == "mamba" else "one A per head"
    lam_a = st.intrinsic_rates(ssm)
    lengths = [r.L for r in m.results["tables"][layer].rows]
    eff, dlt = effective_vs_length(m.agg, ssm, lengths)
    by_layer = intrinsic_by_layer(st)
    width = st.delta_channels(ssm)
    per = ("(channel, state)" if part == "mamba" else "head" if width == lam_a.size
           else "key channel of each head")
    info = {"layer": ssm, "kind": kind, "intrinsic": f"exp(A_log), {modes_of}",
            "n_intrinsic": int(lam_a.size), "delta_channels": width,
            "effective": f"Δ_t·exp(A_log) per token and {per}"}
    outside = {"intrinsic_by_layer": by_layer.outside, "effective_vs_L": eff.outside,
               "delta_vs_L": dlt.outside,
               "intrinsic_min_max": [float(lam_a.min()), float(lam_a.max())]}
    return Decay(ssm, layer, kind, st.layer_kind(layer), modes_of, a_log_distribution(st, ssm),
                 intrinsic_spectrum(st, ssm),
                 memory_kernel(lam_a, t=np.geomspace(1e-6, 1e7, 120), label=r"$K_A(t)$"),
                 by_layer, len(st.ssm_layers), st.n_model_layers, eff, dlt, info, outside,
                 a_log_shift(st.a_log(ssm)) if has_s4d_init(st, ssm) else None)


@dataclass(frozen=True)
class NullBands:
    """tdos_vs_nulls.png: per null kind the TDOS of each null, and the trained TDOS on exactly
    the nulls' sequences and L (`trained`: [(sequences or None, L, Spectrum)])."""
    kinds: dict                    # {kind: [Spectrum of each null]}
    trained: tuple
    modes: str
    window: tuple


def null_bands(m) -> NullBands | None:
    """The spectra of tdos_vs_nulls.png (None without nulls)."""
    study = m.results.get("nulls")
    if study is None:
        return None
    modes = m.primary.modes
    kinds = {}
    for kind, v in study.kinds.items():
        seqs = None if v["sequences"] is None else range(v["sequences"])
        kinds[kind] = [tdos(m.agg.model(n), m.layer, v["L"], seqs, modes=modes) for n in v["nulls"]]
    shared = sorted({(v["sequences"], v["L"]) for v in study.kinds.values()}, key=str)
    trained = tuple((S, Ls, tdos(m.agg, m.layer, Ls, None if S is None else range(S), modes=modes))
                    for S, Ls in shared)
    return NullBands(kinds, trained, modes, tuple(m.settings.window))
