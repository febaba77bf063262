"""`tdos analyze` end to end on synthetic Mamba-like and Transformer-like stores."""
import csv
import dataclasses
import json

import pytest
from matplotlib.image import imread
from synthetic_store import planned_mask, synthetic_model, write_blocks, write_store

from analysis.cli import main
from analysis.views.live import render_live
from sweep.format.ledger import is_usable

COMMON = ["fig1_collective_spectrum.png", "fig5_tdos_vs_length.png", "fig6_tdos_vs_depth.png",
          "fig7_cumulative_fits.png", "fig8_beta_vs_length.png", "beta_vs_depth.png",
          "self_averaging.png", "table1.csv", "table1.md"]
MAMBA = ["fig2_intrinsic.png", "fig3_intrinsic_all_layers.png", "fig4_effective_vs_length.png"]


def assert_real_png(path):
    assert path.stat().st_size > 15_000, path
    img = imread(path)
    assert img.shape[0] > 300 and img.shape[1] > 400 and img[..., :3].std() > 0.05, path


def test_analyze_mamba_like_store(tmp_path, capsys):
    m = synthetic_model(beta=-0.2, rows=3, lmax=64, d=48, n_ir=24, seed=2)
    write_store(tmp_path / "m.zarr", [m])
    assert main([str(tmp_path / "m.zarr"), "--out", str(tmp_path / "rep"), "--n-boot", "100"]) == 0
    rep = tmp_path / "rep"
    for name in COMMON + MAMBA + ["fits.json", "report.md"]:
        assert (rep / name).exists(), name
        if name.endswith(".png"):
            assert_real_png(rep / name)
    fits = json.loads((rep / "fits.json").read_text())["models"]["mamba-syn"]
    assert [r["L"] for r in fits["table1"]] == [8, 16, 32, 64]
    last = fits["table1"][-1]
    for m in ("all_stable", "symmetry_removed"):
        assert abs(last[f"beta_{m}"] - (-0.2)) < 0.05
        assert last[f"ci_lo_{m}"] < last[f"beta_{m}"] < last[f"ci_hi_{m}"]
    assert last["delta_beta"] == last["beta_all_stable"] - last["beta_symmetry_removed"]
    # the marginal ζ ≈ 1 of every token: dropped by symmetry-removed; all-stable counts it
    # only where complex64 rounded |ζ| below 1, and never as marginal
    assert fits["modes"]["symmetry-removed"]["marginal"] == fits["modes"]["symmetry-removed"]["tokens"] == 2 * 64
    assert fits["modes"]["all-stable"]["marginal"] == 0 and fits["modes_drawn"] == "all-stable"
    with open(rep / "table1.csv") as fh:
        rows = list(csv.DictReader(fh))
    for col in ("L", "layer", "beta_all_stable", "n_modes_all_stable", "beta_symmetry_removed",
                "n_modes_symmetry_removed", "ci_lo_all_stable", "ci_hi_symmetry_removed",
                "r2_all_stable", "r2_symmetry_removed", "mle_beta_all_stable",
                "mle_beta_symmetry_removed", "delta_beta"):
        assert col in rows[0], col
    report = (rep / "report.md").read_text()
    # a toy Mamba is not the paper's checkpoint: no paper value beside it, nor its note (issue 57)
    assert "−0.168" not in report and "| 64 |" in report
    assert "the symmetry-removed count drops" in report and "below the window" in report
    assert "figures draw the **all-stable** count" in report
    out = capsys.readouterr().out.splitlines()
    # the first console line is the primary β, the report's headline; the rest are diagnostics
    h = fits["primary"]["headline"]
    assert out[0].startswith("mamba-syn (headline, mle:symmetry-removed): layer 2, L = 64: β = ")
    assert f"{h['beta']:+.3f} [{h['ci'][0]:+.3f}, {h['ci'][1]:+.3f}]" in out[0]
    assert out[1].startswith("  diagnostics, every estimator and count: all-stable cumulative β = -0.1")
    assert "Δβ" in out[1] and all(ln.startswith(("  ", "report:")) for ln in out[1:])
    # the report says why layer 2 is the representative one
    assert fits["why_layer"].startswith("layer 2, the middle of the stored layers [0, 2, 4]")
    assert f"Representative: {fits['why_layer']}" in report


def _table_with_gof(tmp_path):
    from analysis import aggregate, open_store
    from analysis.studies.tables import beta_vs_length
    from sweep.format.settings import Settings

    m = synthetic_model(beta=-0.2, rows=1, lmax=32, d=48, n_ir=24, seed=2)
    path = write_store(tmp_path / "f.zarr", [m])
    st = open_store(path)
    table = beta_vs_length(st, aggregate(path).model(st.name), st.layers[0], [16, 32],
                           Settings(n_boot=20))
    # one row rejected, one not (the table is immutable: a copy with these GOF p)
    gof = [{"all-stable": 0.002, "symmetry-removed": 0.002}, {"all-stable": 0.5}]
    return dataclasses.replace(table, rows=[dataclasses.replace(row, by_mode={
        m: dataclasses.replace(x, gof_p=p.get(m, x.gof_p)) for m, x in row.by_mode.items()})
        for row, p in zip(table.rows, gof)])


def test_figures_say_window_slope_estimator_and_count(tmp_path):
    """Fig 7 calls a fit where the power law is rejected a window slope, with its GOF p; Fig 8
    draws the primary's estimator and count and says so; its y-label's parentheses balance and
    never nest, and the label fits inside the figure."""
    from analysis.report import figures as F
    from sweep.format.settings import Settings

    table = _table_with_gof(tmp_path)
    ax = F.fig7_cumulative(table, "fig 7").axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0].startswith("L = 16: window slope s − 1 = ") and "GOF p = 0.002" in labels[0]
    assert labels[1].startswith("L = 32: β = ") and "GOF p = 0.5" in labels[1]
    assert "cumulative:all-stable" in ax.get_ylabel()
    primary = Settings().primary_for(False)                   # mle:symmetry-removed
    fig = F.fig_beta(table, "fig 8", primary=primary)
    ax = fig.axes[0]
    label = ax.get_ylabel()
    assert "[mle:symmetry-removed]" in label
    depth = 0
    for c in label:
        depth += (c == "(") - (c == ")")
        assert 0 <= depth <= 1, label
    assert depth == 0
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("window slope, not an exponent") for t in legend)
    assert any("mle:symmetry-removed" in t for t in legend)
    fig.canvas.draw()
    box, page = ax.yaxis.label.get_window_extent(), fig.bbox
    assert page.y0 <= box.y0 and box.y1 <= page.y1 and page.x0 <= box.x0


def test_modes_flag_picks_what_figures_draw(tmp_path, capsys):
    m = synthetic_model(rows=1, lmax=16, d=16, n_ir=8, seed=6, n_model_layers=2)
    write_store(tmp_path / "m.zarr", [m])
    assert main([str(tmp_path / "m.zarr"), "--out", str(tmp_path / "rep"), "--n-boot", "20",
                 "--quiet", "--modes", "symmetry-removed", "--lengths", "8", "12"]) == 0
    fits = json.loads((tmp_path / "rep" / "fits.json").read_text())["models"]["mamba-syn"]
    assert fits["modes_drawn"] == "symmetry-removed"
    assert [r["L"] for r in fits["table1"]] == [8, 12, 16]     # configured lengths, then L_max
    assert "figures draw the **symmetry-removed** count" in (tmp_path / "rep" / "report.md").read_text()
    capsys.readouterr()
    assert main([str(tmp_path / "m.zarr"), "--modes", "every-mode"]) == 2   # names the choices
    assert capsys.readouterr().err == ("tdos: error: analysis.modes: 'every-mode' is not one of "
                                       "all-stable, symmetry-removed — e.g. all-stable\n")


def test_analyze_two_transformer_models_fp32_fp64(tmp_path):
    kw = dict(arch="gpt_neox", beta=-0.1, rows=2, lmax=32, d=40, n_ir=20, seed=3)
    a = synthetic_model(name="neox-fp32", **kw)
    b = synthetic_model(name="neox-fp64", dtype="float64", **kw)
    write_store(tmp_path / "t.zarr", [a, b])
    assert main([str(tmp_path / "t.zarr"), "--out", str(tmp_path / "rep"), "--n-boot", "50",
                 "--quiet", "--window", "1e-4", "5e-2"]) == 0
    rep = tmp_path / "rep"
    for sub in ("neox-fp32", "neox-fp64"):
        for name in COMMON:
            assert (rep / sub / name).exists(), (sub, name)
        for name in MAMBA:
            assert not (rep / sub / name).exists()
    for name in ("compare_beta.png", "compare_delta.png", "compare_tdos.png", "compare_kernel.png",
                 "precision_neox-fp32_vs_neox-fp64.png"):
        assert_real_png(rep / name)
    report = (rep / "report.md").read_text()
    assert "Figures 2–4 skipped" in report and "Precision: neox-fp32 (float32) matched" in report
    prec = json.loads((rep / "fits.json").read_text())["models"]["neox-fp64"]["precision"][0]
    assert prec["reference"] == "neox-fp64" and prec["other"] == "neox-fp32"
    for m in ("all-stable", "symmetry-removed"):
        assert set(prec["delta_beta"][m]) == {"8", "16", "32"}
    # same spectra in two precisions: symmetry-removed agrees; all-stable does not, because
    # the per-token ζ ≈ 1 lands inside the unit circle at λ ~ 1e-14 for half the fp64 tokens
    assert max(abs(v) for v in prec["delta_beta"]["symmetry-removed"].values()) < 0.02
    assert max(abs(v) for v in prec["delta_beta"]["all-stable"].values()) > 0.2
    assert prec["matched_pairs"] > 0 and prec["tokens"] == 2 * 32      # 2 sequences, layer 0


def test_cli_rejects_foreign_path_in_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "nothing.zarr")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no store" in err


def test_render_live_during_and_after_sweep(tmp_path):
    m = synthetic_model(rows=2, lmax=32, d=24, n_ir=12, seed=4)
    half = planned_mask(m)
    half[:, :, 2:] = 0
    write_store(tmp_path / "r.zarr", [m], done={m.name: half})
    out = render_live(tmp_path / "r.zarr", tmp_path / "live.png")
    assert_real_png(out)
    write_blocks(tmp_path / "r.zarr", m, planned_mask(m) * (half == 0))
    render_live(tmp_path / "r.zarr", tmp_path / "live.png")
    from analysis.io.aggregate import Aggregate
    assert is_usable(Aggregate(str(tmp_path / "r.zarr") + ".agg").ledger()).all()


def test_readme_says_how_to_find_a_shadowing_analysis_py(tmp_path):
    """The README's one-line check finds a user's own analysis.py in the folder Python runs
    from, which shadows ours, and finds ours without it."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    readme = (repo / "README.md").read_text()
    assert "`analysis.py` (or `sweep.py`, `cluster.py`)" in readme and "shadows ours" in readme
    check = re.search(r'\.venv/bin/python (-c "import analysis; print\(analysis\.__file__\)")',
                      readme).group(1)
    code = check[4:-1]
    env = {"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"}
    ours = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, text=True,
                          capture_output=True, check=True).stdout.strip()
    assert Path(ours) == repo / "analysis" / "__init__.py"
    (tmp_path / "analysis.py").write_text("x = 1\n")          # a user's own script
    theirs = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, text=True,
                            capture_output=True, check=True).stdout.strip()
    assert Path(theirs) == tmp_path / "analysis.py"
