"""`render(analysis, out)`: the files of `tdos analyze` from an `Analysis` (analysis/measure/),
computing nothing. Per model its figures (with the study's shape
and β-per-position picture), table1.csv and table1.md (in out/<model>/ with
several models), the precision figures and the comparison (figures, compare.json), then
fits.json and report.md; each file written once (report/outputs.py), none rewritten or
appended to. The renderers import no fit, law or study (tests/test_render.py)."""
from __future__ import annotations

from analysis.report import figures as F
from analysis.report.compare import add_comparison, comparison_markdown, verdict_lines
from analysis.report.fits_json import fits_doc, json_text
from analysis.report.markdown import report_text, table_markdown
from analysis.report.model_figures import model_figures
from analysis.report.outputs import Outputs


def render(analysis, out) -> list[str]:
    """Write every file of `analysis` into folder `out`; return their names, relative to
    `out`, in the order written."""
    outputs = Outputs(out)
    outputs.out.mkdir(parents=True, exist_ok=True)
    several = len(analysis) > 1
    files = {}
    for name, r in analysis.items():
        sub = f"{name}/" if several else ""
        files[name] = [outputs.add(sub + f, fig)[len(sub):] for f, fig in model_figures(r)]
        if analysis.study is not None and name in analysis.study.by_position:
            files[name].append(outputs.add(sub + "shape_and_positions.png", F.fig_shape_and_positions(
                analysis.study.shape.get(name), analysis.study.by_position[name]))[len(sub):])
        files[name] += [outputs.add(sub + "table1.csv", r.table.csv_text())[len(sub):],
                        outputs.add(sub + "table1.md", table_markdown(r) + "\n")[len(sub):]]
    extra = [outputs.add(f"precision_{p.names[1]}_vs_{p.names[0]}.png", F.fig_precision(
        p, f"{p.names[1]} ({p.dtypes[1]}) vs {p.names[0]} ({p.dtypes[0]}), layer {p.layer} "
           f"[{analysis.settings.modes} modes]")) for p in analysis.precision]
    comparison_md, comparison_lines = None, []
    if analysis.comparison is not None:
        before = len(outputs.written)
        add_comparison(analysis.comparison, outputs, markdown=False)
        extra += outputs.written[before:]
        comparison_md = comparison_markdown(analysis.comparison, heading_level=3)
        comparison_lines = ["- across models:", *("  " + x for x in
                                                   verdict_lines(analysis.comparison))]
    outputs.add("fits.json", json_text(fits_doc(analysis, outputs.out)))
    outputs.add("report.md", report_text(analysis, outputs.out, files, extra, comparison_md,
                                         comparison_lines))
    return outputs.written
