"""`tdos analyze` end to end on synthetic Mamba-like and Transformer-like stores."""
import json

from matplotlib.image import imread

from analysis.cli import main
from analysis.live import render_live
from synthetic_store import planned_mask, synthetic_model, write_blocks, write_store

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
    assert main([str(tmp_path / "m.zarr"), "--out", str(tmp_path / "rep"), "--n-boot", "100",
                 "--quiet"]) == 0
    rep = tmp_path / "rep"
    for name in COMMON + MAMBA + ["fits.json", "report.md"]:
        assert (rep / name).exists(), name
        if name.endswith(".png"):
            assert_real_png(rep / name)
    fits = json.loads((rep / "fits.json").read_text())["models"]["mamba-syn"]
    assert [r["L"] for r in fits["table1"]] == [8, 16, 32, 64]
    last = fits["table1"][-1]
    assert abs(last["beta"] - (-0.2)) < 0.05 and last["ci_lo"] < last["beta"] < last["ci_hi"]
    assert fits["modes"]["marginal"] == fits["modes"]["tokens"] == 2 * 64
    report = (rep / "report.md").read_text()
    assert "−0.168" in report and "| 64 |" in report          # paper reference beside ours
    assert "mamba-syn: layer 2, L = 64: β = -0.1" in capsys.readouterr().out


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
    for name in ("models_beta.png", "precision_neox-fp32_vs_neox-fp64.png"):
        assert_real_png(rep / name)
    report = (rep / "report.md").read_text()
    assert "Figures 2–4 skipped" in report and "Precision check" in report
    prec = json.loads((rep / "fits.json").read_text())["models"]["neox-fp32"]["precision"][0]
    assert abs(prec["delta_beta"]) < 0.02        # same spectra, two precisions


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
    from analysis.aggregate import Aggregate
    assert (Aggregate(str(tmp_path / "r.zarr") + ".agg").ledger() == 1).all()
