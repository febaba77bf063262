"""The quantization ensemble's section of report.md (studies/ensemble.py; fits.json carries its
`to_dict()`): per observable the trained value beside the members' min, max and sd,
and whether each trained-vs-null verdict holds at every member."""
from __future__ import annotations

import numpy as np

from analysis._format import ci, num


def ensemble_markdown(study, heading="###") -> list:
    """report.md lines of one model's ensemble study (empty for None)."""
    if study is None:
        return []
    md = [f"{heading} Over its quantization ensemble (layer {study.layer}, L = {study.L})", "",
          f"{len(study.members)} members ({', '.join(f'`{m}`' for m in study.members)}): the model "
          f"with every weight moved by a seeded uniform draw within its own rounding bin "
          f"(docs/nulls.md, \"The quantization ensemble\"). They are read here, not as models "
          f"of their own, and they are not nulls.", "",
          "| observable | trained [CI] | members min … max | members sd | "
          "(trained − member mean) / sd | against nulls: p ensemble, p Holm, verdict |",
          "|---|---|---|---|---|---|"]
    for s in study.spreads:
        v, t = s.values, s.trained
        z = (t.value - v.mean()) / s.sd if np.isfinite(s.sd) and s.sd > 0 else np.nan
        verdicts = "; ".join(f"{num(a.p_ensemble, '.2g')}, {num(a.p_adjusted, '.2g')}: "
                             f"**{a.verdict}**" for a in s.against_nulls.values()) or "no nulls"
        md.append(f"| {s.observable} | {num(t.value, '+.4g')} [{num(t.lo, '+.4g')}, {num(t.hi, '+.4g')}] | "
                  f"{num(v.min(), '+.4g')} … {num(v.max(), '+.4g')} | {num(s.sd, '.3g')} | {num(z, '+.2f')} | "
                  f"{verdicts} |")
    seqs = study.spreads[0].sequences if study.spreads else 0
    md += ["", f"The trained value and the members are read on the members' {seqs} sequence(s). "
           "Rule: a trained-vs-null verdict stands with the ensemble only when it holds at "
           "every member, one null kind at a time: on the sequences the trained model, the "
           "members and that kind's nulls share, each member is compared with those nulls as the "
           "trained value is (its own interval); p ensemble is the largest raw p of the trained "
           "value and the members (an intersection-union test), adjusted by Holm over this "
           "table's (observable, kind) pairs; every Δ must have the trained value's sign.", ""]
    return md


def ensemble_depth_markdown(depth, heading="###") -> list:
    """report.md lines of the ensemble at every layer it was swept (studies/ensemble.py
    `EnsembleDepth`; empty for None): per layer and observable the trained value, the members'
    range and sd, and the verdicts counted in the family across depth."""
    if depth is None:
        return []
    md = [f"{heading} Over its quantization ensemble across depth (layers "
          f"{', '.join(map(str, depth.layers))})", "",
          (depth.family.describe() if depth.family is not None else "No test against nulls.") +
          " Each row as in the table above, at its layer (L = min(L, the layer's length)); the "
          "representative layer's family is separate.", "",
          "| layer | observable | trained [CI] | members min … max | members sd | against nulls: "
          "p ensemble, p Holm, verdict |", "|---|---|---|---|---|---|"]
    for layer, study in depth.studies.items():
        for s in study.spreads:
            v, t = s.values, s.trained
            verdicts = "; ".join(f"{num(a.p_ensemble, '.2g')}, {num(a.p_adjusted, '.2g')}: "
                                 f"**{a.verdict}**" for a in s.against_nulls.values()) or "no nulls"
            md.append(f"| {layer} | {s.observable} | {num(t.value, '+.4g')} "
                      f"{ci(t.lo, t.hi, '+.4g')} | {num(v.min(), '+.4g')} … {num(v.max(), '+.4g')} | "
                      f"{num(s.sd, '.3g')} | {verdicts} |")
    return md + [""]
