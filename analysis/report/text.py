"""The sentences and captions the renderers share (report.md, fits.json, compare.md, the
depth and memory sections): one place, imported by each, so no renderer imports another."""
from __future__ import annotations

import numpy as np

FIGURE_CAPTIONS = {
    "tdos_vs_nulls.png": "the trained model's ρ_block (primary count) on its nulls' sequences and "
                         "L, over one band per null kind (min … max per bin): the same "
                         "architecture and tokens with weights that learned nothing",
    "nulls_across_depth.png": "the primary β and the window mode density at every layer the model "
                              "and its nulls share: the trained value with its interval on the "
                              "nulls' tokens, each null one point, one colour per kind",
    "fig1_collective_spectrum.png": "Fig 1: eigenvalues ζ of J_tt (plane, near ζ=1, |ζ|, θ, λ–θ), "
                                    "ρ_block linear/log, memory kernel K(t) beside t^−(1+β) of the "
                                    "headline β",
    "fig2_intrinsic.png": "Fig 2: A_log distribution beside its S4D-real init, ρ_int(λ_A), K_A(t) with t⁻¹ reference",
    "fig3_intrinsic_all_layers.png": "Fig 3: ρ_int of every model layer overlaid",
    "fig4_effective_vs_length.png": "Fig 4: ρ_eff(Δ·λ_A) and Δ distributions vs L",
    "fig5_tdos_vs_length.png": "Fig 5: ρ_block vs L (prefixes of one sweep)",
    "fig6_tdos_vs_depth.png": "Fig 6: ρ_block across depth at fixed L",
    "fig7_cumulative_fits.png": "Fig 7: cumulative N(<λ) with the cumulative fit per L and its "
                                "GOF p; dashed: a window slope (power law rejected); the headline "
                                "β in the box (the cumulative fit is a diagnostic where the "
                                "headline is another estimator)",
    "fig8_beta_vs_length.png": "Fig 8: the primary β vs L with CIs (the legend says what they "
                               "resampled); filled: an exponent, hollow: a window slope (power "
                               "law rejected)",
    "beta_vs_depth.png": "the primary β across depth at fixed L, drawn as Fig 8 (hollow: a "
                         "window slope)",
    "self_averaging.png": "App. B: (a) band-weight variance vs pooled tokens T, slope vs −1; "
                          "(b) ⟨ln λ_(k)⟩, k = 1, 2, 4, vs T·d, slope vs −1/(1+β); "
                          "(c) K(t) long-time exponent vs 1+β",
    "window_sensitivity.png": "(a) local exponent β(λ) (MLE in sliding one-decade sub-windows, "
                              "CI band) with the window's two estimators; (b) β as each window "
                              "edge moves ×/÷ 2 and 4; (c) the in-window CDF against the fitted "
                              "power law (KS, Monte-Carlo p)",
    "compare_beta.png": "β vs L (representative layers) and vs relative depth (shared L) of "
                        "every model, both mode counts, the cumulative fit (a diagnostic: the "
                        "verdicts read the primary β), each CI from its model's own units",
    "compare_delta.png": "Δβ of every pair with its CI, vs L and vs relative depth",
    "compare_tdos.png": "normalised ρ_block of every model at the shared L, one panel per "
                        "matched relative depth",
    "compare_kernel.png": "K(t) of every model at its representative layer and the shared L",
    "depth.png": ("stacked blocks: (a) β of the per-step rates −ln|ζ|/s against span s, the "
              "headline's estimator, both counts (hollow: a window slope); "
              "(b) measured mean squared gain g(l, s) = ‖P_t‖_F²/d against the independent-layers "
              "prediction Π_j ‖J_j‖_F²/d and the spectral one Π_j Σ|ζ_j|²/d over the stack's own "
              "layers, geometric means over tokens, per start layer; (c) densities of single-block rates, the longest "
              "stack's per-step rates and the Lyapunov rates −γ; (d) the mean Lyapunov spectrum "
              "γ_i = (1/S) ln σ_i(P); "
              "(e) Henrici's departure from normality of J_tt and (f) ‖J_tt‖_F²/d across depth"),
    "memory.png": ("token memory: the normalised lag profile m(k) = ⟨‖J_{t,t−k}‖_F² / ‖J_tt‖_F²⟩ of "
              "every swept layer on (a) log-log and (b) lin-log axes, K_A²(k) of Mamba-style layers "
              "dashed; (c) the power-law exponent α and (d) the memory length ξ per layer, each "
              "alone with its CI, no line joining layers (□: the law BIC prefers there; hollow ×: "
              "rejected, p < 0.01, a slope of the window; nothing where the replicates split)"),
    "compare_memory.png": "token memory of every model at its representative layer: m(k) on "
                          "(a) log-log and (b) lin-log axes with CIs, K_A²(k) dashed",
    "compare_depth.png": "stacked blocks of every model: (a) β of the per-step rates against "
                         "span s, both counts, with CIs; (b) the top Lyapunov exponent γ_1",
}
PAPER_COLUMN = ("The paper β column is the paper's own measurement of this checkpoint, layer and "
                "window (all stable modes): compare it with the all-stable columns.")
ESTIMATOR_SENTENCE = (
    "Two estimators of β. The **cumulative fit** (the paper's number) is the log-slope of "
    "N(<λ), which counts every mode below λ — the modes below the window too — so it answers "
    "\"what does the paper's recipe give for this spectrum\" and moves with how many modes sit "
    "under the window. The **in-window MLE** is the exponent of the density ρ ∝ λ^β of the "
    "modes inside the window alone: it answers \"how does the density scale inside the "
    "window\". They agree for a power law that continues below the window.")



def symmetry_sentences(res) -> str:
    """Two sentences: where the modes symmetry-removed drops sit, and what that does to β."""
    r = res.row()
    lo, hi = res.settings.window
    tok = max(r.n_tokens, 1)
    effect = (f"β all-stable − β symmetry-removed = {r.delta_beta:+.3f} here."
              if np.isfinite(r.delta_beta) else "no β is fitted here (no mode in the window).")
    return (f"At layer {res.layer}, L = {r.L}, the symmetry-removed count drops {r.sym_removed:,} "
            f"modes ({r.sym_removed / tok:.2f} per token: the norm's scale/shift modes and "
            f"|λ| < {res.threshold:g}), of which {r.sym_stable:,} are stable (0 < |ζ| < 1) and so "
            f"counted by all-stable: {r.sym_below:,} below the window (λ < {lo:g}) and "
            f"{r.sym_inside:,} inside it. Each stable one below the window adds one to N(<λ) at "
            f"every point of the window, most in relative terms at its low end, which flattens "
            f"log N against log λ: {effect}")
