"""The text of report.md: both mode counts, where the symmetry modes sit, precision checks."""
from __future__ import annotations

import os

from .inputs_md import inputs_lines
from .rates import MODES, SCALE_RESIDUAL_MAX
from .tables import PAPER_BETA, PAPER_MODES, PAPER_PYTHIA
from .uncertainty import laws_markdown, table_note

FIGURE_CAPTIONS = {
    "fig1_collective_spectrum.png": "Fig 1: eigenvalues ζ of J_tt (plane, near ζ=1, |ζ|, θ, λ–θ), "
                                    "ρ_block linear/log, memory kernel K(t)",
    "fig2_intrinsic.png": "Fig 2: A_log distribution beside its S4D-real init, ρ_int(λ_A), K_A(t) with t⁻¹ reference",
    "fig3_intrinsic_all_layers.png": "Fig 3: ρ_int of every model layer overlaid",
    "fig4_effective_vs_length.png": "Fig 4: ρ_eff(Δ·λ_A) and Δ distributions vs L",
    "fig5_tdos_vs_length.png": "Fig 5: ρ_block vs L (prefixes of one sweep)",
    "fig6_tdos_vs_depth.png": "Fig 6: ρ_block across depth at fixed L",
    "fig7_cumulative_fits.png": "Fig 7: cumulative N(<λ) with the window fits per L",
    "fig8_beta_vs_length.png": "Fig 8: β vs L with bootstrap CIs",
    "beta_vs_depth.png": "β across depth at fixed L",
    "self_averaging.png": "App. B: (a) band-weight variance vs pooled tokens T, slope vs −1; "
                          "(b) ⟨ln λ_(k)⟩, k = 1, 2, 4, vs T·d, slope vs −1/(1+β); "
                          "(c) K(t) long-time exponent vs 1+β",
    "models_beta.png": "β vs L of every model in the store",
}
SSM_NOTE = "SSM rates: no mode count applies"


def table_markdown(res) -> str:
    """Table I of one model, both counts, with the paper's β beside (all-stable)."""
    ref = PAPER_BETA if res.arch == "mamba" else (PAPER_PYTHIA if res.arch == "gpt_neox" else None)
    return res.table.to_markdown(reference=ref)


def symmetry_sentences(res, window) -> str:
    """Two sentences: where the modes symmetry-removed drops sit, and what that does to β."""
    r = res.row()
    lo, hi = window
    tok = max(r.n_tokens, 1)
    return (f"At layer {res.layer}, L = {r.L}, the symmetry-removed count drops {r.sym_removed:,} "
            f"modes ({r.sym_removed / tok:.2f} per token: the norm's scale/shift modes and "
            f"|λ| < {res.threshold:g}), of which {r.sym_stable:,} are stable (0 < |ζ| < 1) and so "
            f"counted by all-stable: {r.sym_below:,} below the window (λ < {lo:g}) and "
            f"{r.sym_inside:,} inside it. Each stable one below the window adds one to N(<λ) at "
            f"every point of the window, most in relative terms at its low end, which flattens "
            f"log N against log λ: β all-stable − β symmetry-removed = {r.delta_beta:+.3f} here.")


def _modes_line(r) -> str:
    """Counts of the modes each count leaves out of the fits, at the representative (layer, L)."""
    sr, al = r.special["symmetry-removed"], r.special["all-stable"]
    tok = max(sr.get("tokens", 1), 1)
    if r.scale_by_eigenvector:
        dirs = "h_t and 𝟙/√d" if r.extra.get("shift_by_eigenvector", True) else "h_t only"
        scale = (f"scale mode (the norm's invariant directions, {dirs}: eigenvalue nearest ρ "
                 f"where r ≤ {SCALE_RESIDUAL_MAX:g}) {sr.get('scale', 0):,} = "
                 f"{sr.get('scale', 0) / tok:.2f} per token; ")
    else:
        scale = "scale mode not identified (store has no scale_rayleigh/scale_residual); "
    return (f"{sr.get('tokens', 0)} tokens. all-stable leaves out only |ζ| ≥ 1 "
            f"({al.get('unstable', 0):,}) and ζ = 0 ({al.get('zero', 0):,}). symmetry-removed also "
            f"leaves out the {scale}marginal (|λ| < {r.threshold:g}) {sr.get('marginal', 0):,} = "
            f"{sr.get('marginal', 0) / tok:.2f} per token")


def _reference_line(r) -> str:
    if r.arch == "mamba":
        return ("Paper (Mamba-370M, layer 24, every stable mode counted): β = −0.228 (L=8, 2,719 "
                f"modes) … −0.168 (L=512, {PAPER_MODES[512]:,} modes), R² ≈ 0.99, stable near −0.17 "
                "for L ≥ 64: compare with the all-stable columns.")
    if r.arch == "gpt_neox":
        return ("Companion paper (Pythia-410M): β ≈ −0.121, −0.128, −0.10, −0.10 at L = 8, 16, 24, "
                "28: compare with the all-stable columns.")
    return "Reference: Mamba-370M β ≈ −0.17; Pythia-410M β ≈ −0.10 … −0.13 (all stable modes)."


def precision_lines(p) -> list:
    """Report lines of one fp32-vs-fp64 comparison (PrecisionComparison.to_dict())."""
    lam = p["unresolved_below"]
    res = ("fp32 resolves every matched rate (median relative error ≤ 10 % in every bin)"
           if lam == 0 else f"{p['dtypes'][1]} does not resolve λ below ≈ {lam:.1e} (median "
           f"|δλ|/λ above {p['resolved_max_rel_err']:.0%} there)")
    out = [f"Precision: {p['other']} ({p['dtypes'][1]}) matched to {p['reference']} "
           f"({p['dtypes'][0]}) token by token at layer {p['layer']} ({p['matched_pairs']:,} stable "
           f"modes of {p['tokens']} tokens, Hungarian matching within each J_tt): {res}.", ""]
    out += ["| L | " + " | ".join(f"β {m} ({p['dtypes'][0]} / {p['dtypes'][1]}) | Δβ {m}"
                                   for m in MODES) + " |",
            "|---|" + "---|---|" * len(MODES)]
    for L in p["lengths"]:
        cells = []
        for m in MODES:
            a, b = p["beta"][m][L]
            cells += [f"{a:+.4f} / {b:+.4f}", f"{p['delta_beta'][m][L]:+.4f}"]
        out.append(f"| {L} | " + " | ".join(cells) + " |")
    return out + [""]


def inputs_line(i: dict) -> str:
    """What the tokens were, from the group's `inputs` record (sweep/inputs.py)."""
    shape = f"{i.get('sequences', '?')} sequence(s) x {i.get('length', '?')} tokens"
    tok = i.get("tokenizer") or "the checkpoint's own tokenizer"
    if i.get("dataset"):
        return f"{shape} of dataset `{i['dataset']}` ({i.get('windows')} windows), tokenized by {tok}"
    if not i.get("text"):
        return f"{shape} of uniform random token ids (seed {i.get('seed', 0)})"
    return (f"{shape} of natural text `{i['text']}` ({i.get('text_file_count', 1)} file(s), "
            f"sha256 {str(i.get('text_sha256', ''))[:12]}…), tokenized by {tok}")


def _model_section(name, r, window, rel) -> list:
    md = [f"## {name} ({r.arch}, {r.dtype})", "",
          f"- blocks: {r.counts['done']} done, {r.counts['flagged']} flagged (excluded), "
          f"{r.counts['pending']} pending of {r.counts['planned']} planned",
          f"- inputs: {inputs_line(r.extra.get('inputs', {}))}", *inputs_lines(r.extra.get("inputs", {})),
          f"- representative layer {r.layer}, L = {r.L}: {_modes_line(r)}",
          f"- figures draw the **{r.modes}** count (`tdos analyze --modes`); tables carry both", "",
          f"### Table I (layer {r.layer})", "", table_markdown(r), "",
          table_note(r.table, int(r.extra.get("inputs", {}).get("sequences", 1))), "",
          _reference_line(r), "", symmetry_sentences(r, window), "",
          f"### β across depth (L = {r.L})", "", r.depth.to_markdown(), "",
          *laws_markdown(r.extra.get("laws"))]
    for p in r.extra.get("precision", []):
        if p["reference"] == name:
            md += precision_lines(p)
    if r.arch != "mamba":
        md += [f"Figures 2–4 skipped: {r.arch} has no SSM (A_log, Δ are Mamba-only).", ""]
    elif shift := r.extra.get("a_log_shift"):
        md += [f"A_log of layer {r.layer} against its S4D-real initialisation (log 1 … log N): "
               f"{shift['moved']:.1%} of {shift['entries']:,} entries moved by |ΔA_log| > 0.1, "
               f"median |ΔA_log| {shift['median_abs_delta']:.3f}, Kolmogorov–Smirnov distance "
               f"{shift['ks']:.3f} (Fig 2a).", ""]
    md += ["### Figures", ""]
    for f in r.files:
        if f.endswith(".png"):
            md += [f"**{f}** — {FIGURE_CAPTIONS.get(f, '')}", "", f"![{f}]({rel}{f})", ""]
    return md


def write_report(results, path, store_path, window, extra_files, out):
    lo, hi = window
    md = [f"# tdos analysis of `{os.path.abspath(store_path)}`", "",
          "Two mode counts throughout. **all-stable** (the paper's): every eigenvalue with "
          "0 < |ζ| < 1 is a mode, nothing removed. **symmetry-removed**: also drops, per token, "
          "the modes along the norm's invariant directions and |λ| below the marginal threshold. "
          "Δβ = β all-stable − β symmetry-removed.", "",
          f"Fit: least squares of log N(<λ) on log λ at the 20-per-decade grid points inside "
          f"[{lo:g}, {hi:g}] (the paper's window is [1e-4, 5e-2]); β = s − 1. CIs: percentile "
          f"bootstrap; what each CI resampled is said under each table (columns ci_unit_all_stable, ci_unit_symmetry_removed of table1.csv). MLE: bounded power law on the window, a "
          f"binning-free cross-check.", ""]
    for name, r in results.items():
        md += _model_section(name, r, window, f"{name}/" if len(results) > 1 else "")
    if extra_files:
        md += ["## Across models", ""]
        for f in extra_files:
            cap = FIGURE_CAPTIONS.get(f, "one checkpoint in two precisions: |δλ|/λ of matched "
                                         "modes against λ, and both TDOS")
            md += [f"**{f}** — {cap}", "", f"![{f}]({f})", ""]
    path.write_text("\n".join(md))
    return path
