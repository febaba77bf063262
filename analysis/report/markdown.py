"""The text of report.md: both mode counts, both estimators, whether a power law fits,
where the symmetry modes sit, precision checks."""
from __future__ import annotations

from analysis._format import ci, format_p, interval_words, num
from analysis.report.depth import markdown as depth_markdown
from analysis.report.ensemble import ensemble_depth_markdown, ensemble_markdown
from analysis.report.fits_json import portable
from analysis.report.inputs import inputs_lines
from analysis.report.laws import laws_markdown, table_note
from analysis.report.memory import markdown as memory_markdown
from analysis.report.nulls import depth_null_markdown, null_markdown
from analysis.report.text import (ESTIMATOR_SENTENCE, FIGURE_CAPTIONS, PAPER_COLUMN,
                                  symmetry_sentences)
from sweep.format.settings import MODES


def table_markdown(res) -> str:
    """Table I of one model, both counts; the paper's β beside only where it applies."""
    return res.table.to_markdown(reference=res.paper.values or None)


def estimator_lines(res) -> list:
    """The two estimators side by side, and a sentence for every row where they disagree."""
    bad = [(r.key, m) for r in res.table.rows for m in MODES if r.by_mode[m].estimators_disagree]
    out = [ESTIMATOR_SENTENCE, ""]
    if bad:
        first = res.table.rows[[r.key for r in res.table.rows].index(bad[0][0])].by_mode[bad[0][1]]
        out += [f"**The two estimators disagree beyond their {res.table.level:.0%} CIs** in "
                f"{len(bad)} of {len(res.table.rows) * len(MODES)} rows (L, count): "
                + ", ".join(f"{k} {m}" for k, m in bad) + f". At L = {bad[0][0]} ({bad[0][1]}): "
                f"cumulative {first.beta:+.3f} [{first.ci_lo:+.3f}, {first.ci_hi:+.3f}], MLE "
                f"{first.mle_beta:+.3f} [{first.mle_ci_lo:+.3f}, {first.mle_ci_hi:+.3f}], with "
                f"{first.n_below:,} modes below the window.", ""]
    else:
        out += [f"The two estimators' {res.table.level:.0%} CIs overlap in every row.", ""]
    return out


def power_law_lines(res) -> list:
    """Whether a power law fits at the representative (layer, L), in numbers."""
    x = res.row().by_mode[res.modes]
    if not x.fitted:
        return [f"Power law: {res.empty_window_line(res.modes)}.", ""]
    verdict = ("rejected" if x.gof_p < 1 - res.settings.level else "not rejected")
    alts = ", ".join(f"{a.replace('_', ' ')} R = {getattr(x, 'R_' + a):+.2f} (p = "
                     f"{getattr(x, 'p_' + a):.2g})" for a in ("lognormal", "exponential",
                                                             "stretched_exponential"))
    return [f"Power law on [{res.settings.window[0]:g}, {res.settings.window[1]:g}] at layer "
            f"{res.layer}, L = {res.L} ({res.modes}): KS = {x.ks:.4f}, Monte-Carlo p = "
            f"{x.gof_p:.3f} ({res.settings.n_boot} synthetic sets), {verdict} at "
            f"{1 - res.settings.level:.0%}; local β {num(x.local_beta_low)} in the window's lowest "
            f"decade and {num(x.local_beta_high)} in its highest (– where a decade holds too few "
            f"modes); against the alternatives "
            f"(R > 0 favours the power law): {alts}. The test takes modes as independent; with "
            f"{x.n_modes:,} modes even a small curvature is significant, so read KS and the local "
            f"exponent for how far from a power law it is.", ""]


def _modes_line(r) -> str:
    """Counts of the modes each count leaves out of the fits, at the representative (layer, L)."""
    sr, al = r.special["symmetry-removed"], r.special["all-stable"]
    tok = max(sr.get("tokens", 1), 1)
    if r.scale_by_eigenvector:
        dirs = "h_t and 𝟙/√d" if r.shift_by_eigenvector else "h_t only"
        scale = (f"scale mode (the norm's invariant directions, {dirs}: eigenvalue nearest ρ "
                 f"where r ≤ {r.scale_residual_max:g}) {sr.get('scale', 0):,} = "
                 f"{sr.get('scale', 0) / tok:.2f} per token; ")
    else:
        scale = "scale mode not identified (store has no scale_rayleigh/scale_residual); "
    return (f"{sr.get('tokens', 0)} tokens. all-stable leaves out only |ζ| ≥ 1 "
            f"({al.get('unstable', 0):,}) and ζ = 0 ({al.get('zero', 0):,}). symmetry-removed also "
            f"leaves out the {scale}marginal (|λ| < {r.threshold:g}) {sr.get('marginal', 0):,} = "
            f"{sr.get('marginal', 0) / tok:.2f} per token")


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
    """What the tokens were, from the group's `inputs` record (sweep/plan/inputs.py)."""
    shape = f"{i.get('sequences', '?')} sequence(s) x {i.get('length', '?')} tokens"
    tok = i.get("tokenizer") or "the checkpoint's own tokenizer"
    if i.get("dataset"):
        return f"{shape} of dataset `{i['dataset']}` ({i.get('windows')} windows), tokenized by {tok}"
    if not i.get("text"):
        return f"{shape} of uniform random token ids (seed {i.get('seed', 0)})"
    return (f"{shape} of natural text `{i['text']}` ({i.get('text_file_count', 1)} file(s), "
            f"sha256 {str(i.get('text_sha256', ''))[:12]}…), tokenized by {tok}")


def headline_lines(r, declared=None) -> list:
    """The first table of a model: the primary β and its verdict against its nulls, said as a
    window slope where the power law is rejected; the β row read by what it is (`key`), never
    by its label. With a declared family (`declared`: Analysis.declared, studies/study.py) its
    verdicts follow, and the null column is exploratory."""
    h = r.headline
    p = r.primary
    cell = h.value() if h.fitted else f"not fitted: {r.empty_window_line(p.modes)}"
    beta = [c for c in (r.nulls.comparisons if r.nulls else ()) if c.key == "beta"]
    against = "; ".join(
        f"{c.verdict} ({c.sequences} seq, {c.trained.positions})" if not c.check else
        f"{c.verdict}: Δ = {num(c.delta)} {ci(c.lo, c.hi)}, z = {num(c.z, '+.2f')}, p Holm "
        f"{format_p(c.p_adjusted, c.p_method)} ({c.p_method}; {c.sequences} seq, "
        f"{c.trained.positions})" for c in beta)
    if not against:
        against = ("no nulls in the store" if r.nulls is None else
                   "its nulls: no β to set against them (none fitted on their tokens)")
    column = "against its nulls" + (" (exploratory)" if declared is not None else "")
    return [f"| primary estimator | layer, L | primary β [CI] | {column} |", "|---|---|---|---|",
            f"| {p.describe()} | {r.layer}, {r.L} | {cell} | {against} |", "",
            *declared_lines(r.name, declared),
            *_infrared_lines(h, r.infrared), *_density_line(r),
            f"CI: {r.settings.level:.0%}, resampling {h.unit}; {h.n_modes:,} modes in the window. "
            f"Representative: {r.why_layer}. Every other estimator and mode "
            f"count below is a **diagnostic**, not a result.", ""]


def declared_lines(name, declared) -> list:
    """The declared family's tests of one model (studies/study.py StudyRow), with the rule
    table's verdict of each (observable, layer): the only verdicts that are not exploratory."""
    if declared is None:
        return []
    rows = [x for x in declared.rows if x.model == name]
    md = [f"**The declared family** ({declared.status}; {declared.m} tests with enough data, "
          f"family-wise {declared.level:.0%}, Holm): {len(rows)} of its rows on {name}.", ""]
    if rows:
        md += ["| observable | layer | against | Δ [CI] | p Holm (p from) | code |",
               "|---|---|---|---|---|---|"]
        md += [f"| {x.label} | {x.layer} | {x.kind} | {num(x.test.delta, '+.4g')} "
               f"{ci(x.test.lo, x.test.hi, '+.4g')} | {format_p(x.p_holm, x.test.p_method)} "
               f"({x.test.p_method}) | {x.code} |" for x in rows] + [""]
        md += [f"- {v['sentence']}" for v in declared.verdicts() if v["model"] == name] + [""]
    return md


def answer_lines(a, comparison_lines=()) -> list:
    """The short answer report.md opens with: each model's headline β (or window slope) and
    its verdicts, the family's count, the comparison's verdicts; every wide table below."""
    md = ["## The answer", ""]
    declared = a.declared
    for name, r in a.items():
        h = r.headline
        value = h.value() if h.fitted else f"not fitted: {r.empty_window_line(r.primary.modes)}"
        md.append(f"- **{name}**, layer {r.layer}, L = {r.L} ({h.name}; "
                  f"{interval_words(h.level, h.unit)}): {value}")
        if declared is not None:
            md += [f"  - declared: {v['sentence']}" for v in declared.verdicts() if v["model"] == name]
        tag = "exploratory, " if declared is not None else ""
        for c in (r.nulls.comparisons if r.nulls else ()):
            if c.key == "beta":
                numbers = (f"Δ = {num(c.delta)} {ci(c.lo, c.hi)}, p Holm "
                           f"{format_p(c.p_adjusted, c.p_method)} → " if c.check else "")
                md.append(f"  - {tag}{c.observable} against its {len(c.nulls)} {c.kind} nulls "
                          f"({c.sequences} seq): {numbers}**{c.verdict}**")
    fam = a.family
    if fam is not None and fam.tests:
        differ = sum(t.verdict(fam.level) == "differ" for t in fam.tests)
        md.append(f"- {'exploratory ' if declared is not None else ''}family of tests: {fam.m} "
                  f"tests, {differ} differ at {fam.level * 100:g} % after Holm's correction (the "
                  f"table under \"Family of tests\")")
    md += list(comparison_lines)
    return md + [""]


def _infrared_lines(h, ir) -> list:
    """The infrared sub-window `ir` beside a rejected power law: its own slope, CI and GOF."""
    if not h.power_law_rejected or not ir:
        return []
    word = "rejected" if ir["power_law_rejected"] else "not rejected"
    return [f"The power law is rejected over the window, so every β test below is a **window-slope "
            f"test**. Beside it, the infrared sub-window [{ir['window'][0]:g}, {ir['window'][1]:g}] "
            f"(the window without its top decade, where a power law may hold): {ir['estimator']} "
            f"β = {ir['beta']:+.3f} [{ir['ci'][0]:+.3f}, {ir['ci'][1]:+.3f}] ({ir['unit']}), "
            f"{ir['n_modes']:,} modes, power law {word} (GOF p = {ir['gof_p']:.3g}).", ""]


def _density_line(r) -> list:
    """The window mode density at the headline (layer, L): an observable of its own."""
    x = r.row().by_mode[r.primary.modes]
    return [f"Window mode density: {x.density:.3g} [{x.density_lo:.3g}, {x.density_hi:.3g}] "
            f"{r.primary.modes} modes per token in [{r.settings.window[0]:g}, "
            f"{r.settings.window[1]:g}] ({r.settings.level:.0%} CI, {x.ci_unit}).", ""]


def _model_section(name, r, rel, files, precision=(), declared=None) -> list:
    empty = [f"- **{line}**" for line in (r.empty_window_line(m) for m in MODES) if line]
    md = [f"## {name} ({r.arch}, {r.dtype})", "", *headline_lines(r, declared), *null_markdown(r.nulls),
          *depth_null_markdown(r.nulls_depth),
          f"- blocks: {r.counts['done']} done ({r.counts['flagged']} of them flagged, excluded), "
          f"{r.counts['pending']} pending of {r.counts['planned']} planned",
          f"- inputs: {inputs_line(r.inputs)}", *inputs_lines(r.inputs),
          f"- representative layer {r.layer}, L = {r.L}: {_modes_line(r)}",
          f"- figures draw the **{r.modes}** count (`tdos analyze --modes`), β figures (Fig 8, β "
          f"across depth) the primary {r.primary.name}; tables carry both",
          *empty, "",
          f"### Diagnostics: Table I, every estimator and count (layer {r.layer})", "",
          table_markdown(r), "",
          table_note(r.table, int(r.inputs.get("sequences", 1))), "",
          *([PAPER_COLUMN, ""] if r.paper.values else []),
          symmetry_sentences(r), "",
          f"### Two estimators and the power-law test (layer {r.layer})", "",
          *estimator_lines(r), r.table.gof_markdown(), "", *power_law_lines(r),
          f"### β across depth (L = {r.L})", "", r.depth.to_markdown(), "",
          *r.depth.density_lines(), "",
          *laws_markdown(r.laws.to_dict() if r.laws is not None else None),
          *(depth_markdown(r.stacks) if r.stacks is not None else []),
          *(memory_markdown(r.memory) if r.memory is not None else [])]
    for p in precision:
        if p.names[0] == name:
            md += precision_lines(p.to_dict())
    if r.decay is None:
        md += [f"Figures 2–4 skipped: {r.arch} has no swept layer with a learned decay (A_log "
               f"and Δ_t: Mamba-style or gated delta-rule layers).", ""]
    else:
        d, lo_hi = r.decay.info, r.decay.outside_bins["intrinsic_min_max"]
        md += [f"Figures 2–4 draw layer {d['layer']} ({d['kind']}): intrinsic rates "
               f"{d['intrinsic']} ({d['n_intrinsic']:,} values, {lo_hi[0]:.3g} … {lo_hi[1]:.3g}); "
               f"effective rates {d['effective']} (Δ_t {d['delta_channels']:,} wide).", ""]
    if shift := (r.decay.a_log_shift if r.decay is not None else None):
        md += [f"A_log of layer {r.layer} against its S4D-real initialisation (log 1 … log N): "
               f"{shift['moved']:.1%} of {shift['entries']:,} entries moved by |ΔA_log| > 0.1, "
               f"median |ΔA_log| {shift['median_abs_delta']:.3f}, Kolmogorov–Smirnov distance "
               f"{shift['ks']:.3f} (Fig 2a).", ""]
    md += ["### Figures", ""]
    for f in files:
        if f.endswith(".png"):
            md += [f"**{f}** — {FIGURE_CAPTIONS.get(f, '')}", "", f"![{f}]({rel}{f})", ""]
    return md


def report_text(a, out, files, extra_files, comparison_md=None, comparison_lines=()) -> str:
    """report.md of Analysis `a`, written into folder `out` (the store named relative to it, as
    in fits.json); `files`: {model: the figure files of its section}; `comparison_md`: the
    "Across models" lines of the comparison, `comparison_lines` its verdicts (report/compare.py).
    The short answer comes first, every wide table after it."""
    settings, family = a.settings, a.family
    store = portable({"store": a.store}, a.store, out)["store"]
    lo, hi = settings.window
    md = [f"# tdos analysis of `{store}`", "", *answer_lines(a, comparison_lines),
          "## How it was measured", "",
          f"Settings: {settings.describe()}.", "",
          "Two mode counts throughout. **all-stable** (the paper's): every eigenvalue with "
          "0 < |ζ| < 1 is a mode, nothing removed. **symmetry-removed**: also drops, per token, "
          "the modes along the norm's invariant directions and |λ| below the marginal threshold. "
          "Δβ = β all-stable − β symmetry-removed.", "",
          f"Fit: least squares of log N(<λ) on log λ at the 20-per-decade grid points inside "
          f"[{lo:g}, {hi:g}] (the paper's window is [1e-4, 5e-2]); β = s − 1. CIs: each says what "
          f"it resampled (a jackknife over sequences with Student's t when there are two or "
          f"more, else a bootstrap over circular blocks of tokens; columns ci_unit_all_stable, "
          f"ci_unit_symmetry_removed of table1.csv). MLE: the bounded power law on the window, "
          f"its CI resampling the same units.", ""]
    if a.study is not None:
        md += [f"Positions: {a.study.positions.text}.", ""]
    notes = list(dict.fromkeys(r.paper.note for r in a.values() if r.paper.note))
    md += [line for n in notes for line in (f"*{n}*", "")]
    if family is not None and not family.tests:
        md += ["## Family of tests", "", f"No tests ({family.label}): one model, no nulls in the "
               f"store; nothing here is a verdict.", ""]
    elif family is not None:
        md += ["## Family of tests", "", family.describe(), "", *family.table(), "",
               "Depth and memory sections print each of their intervals alone; the corrected "
               "verdicts of those differences are the ones in this table.", ""]
    for name, r in a.items():
        md += _model_section(name, r, f"{name}/" if len(a) > 1 else "", files[name],
                             [p for p in a.precision if name in p.names], a.declared)
    if comparison_md is not None or extra_files:
        md += ["## Across models", ""]
        md += comparison_md or []
        for f in extra_files:
            if f.startswith("compare_") or not f.endswith(".png"):
                continue
            cap = FIGURE_CAPTIONS.get(f, "one checkpoint in two precisions: |δλ|/λ of matched "
                                         "modes against λ, and both TDOS")
            md += [f"**{f}** — {cap}", "", f"![{f}]({f})", ""]
    ensembles = {n: r for n, r in a.items() if r.ensemble is not None}
    if ensembles:
        md += ["", "## Quantization ensembles", ""]
        for name, r in ensembles.items():
            heading = f"### {name}:" if len(ensembles) > 1 else "###"
            md += ensemble_markdown(r.ensemble, heading)
            md += ensemble_depth_markdown(r.ensemble_depth, heading)
    return "\n".join(md) + "\n"
