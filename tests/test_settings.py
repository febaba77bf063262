"""One Settings object reaches every number: the config's `analysis:` section, CLI overrides,
the window in every window-dependent number of fits.json, an empty window, skipped positions,
and the paper's reference values only where they apply."""
import json

import numpy as np
import pytest
import zarr
from synthetic_store import synthetic_model, write_store

from analysis.cli import main
from analysis.views.live import render_live
from analysis.views.summary import summary_text
from sweep.format.settings import Settings, SettingsError


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("settings") / "m.zarr"
    write_store(path, [synthetic_model(beta=-0.2, rows=2, lmax=32, d=48, n_ir=24, seed=2)])
    return path


def _fits(store, tmp, *flags):
    out = tmp / "rep"
    assert main([str(store), "--out", str(out), "--n-boot", "40", "--quiet", "--lengths", "16",
                 *flags]) == 0
    return json.loads((out / "fits.json").read_text())["models"]["mamba-syn"]


def test_the_window_reaches_every_window_dependent_number(store, tmp_path):
    a = _fits(store, tmp_path / "a")
    b = _fits(store, tmp_path / "b", "--window", "1e-3", "5e-2")
    for row_a, row_b in zip(a["table1"], b["table1"]):
        for m in ("all_stable", "symmetry_removed"):
            for col in ("beta", "ci_lo", "ci_hi", "r2", "n_modes", "s", "mle_beta", "mle_ci_lo",
                        "mle_ci_hi", "n_below", "ks", "gof_p", "local_beta_low",
                        "R_lognormal", "R_exponential", "R_stretched_exponential"):
                assert row_a[f"{col}_{m}"] != row_b[f"{col}_{m}"], (col, m)
        assert row_a["sym_below"] != row_b["sym_below"] or row_a["sym_stable"] == 0
    ka, kb = a["laws"]["memory_kernel"], b["laws"]["memory_kernel"]
    assert ka["t_range"] == [20, 10000] and kb["t_range"] == [20, 1000]
    assert ka["exponent"] != kb["exponent"]
    assert list(b["laws"]["self_averaging"]["fits"]) == [
        "band weight var (deep IR 1e-5–1e-3)", "band weight var (fit window 1e-3–5e-2)",
        "band weight var (UV 5e-2–1e2)"] or set(b["laws"]["self_averaging"]["fits"]) == {
        "deep IR 1e-5–1e-3", "fit window 1e-3–5e-2", "UV 5e-2–1e2"}
    assert b["window_sensitivity"]["all-stable"]["window"] == [1e-3, 5e-2]
    assert a["laws"]["ir_resolution"]["fits"]["1"]["expected"] != b["laws"]["ir_resolution"]["fits"]["1"]["expected"]


def test_an_empty_window_says_so_in_one_line_and_prints_no_number(store, tmp_path, capsys):
    out = tmp_path / "rep"
    assert main([str(store), "--out", str(out), "--n-boot", "20", "--lengths", "16",
                 "--window", "1e3", "1e4"]) == 0          # above every synthetic rate
    printed = capsys.readouterr().out
    line = printed.splitlines()[0]                    # the headline: the primary's count
    assert line.startswith("mamba-syn (headline, mle:symmetry-removed)")
    assert "holds no symmetry-removed modes" in line and "rates lie in [" in line and "nothing fitted" in line
    assert "holds no all-stable modes" in printed.splitlines()[1]          # the diagnostics
    assert "predicted" not in printed and "β =" not in printed and "nan" not in printed.lower()
    doc = json.loads((out / "fits.json").read_text())["models"]["mamba-syn"]
    assert doc["laws"] is None and doc["table1"][0]["beta_all_stable"] is None
    assert "holds no" in doc["empty_window"]["all-stable"]
    assert "no modes in the window" in (out / "report.md").read_text()


def test_skip_positions_leave_tokens_out_of_every_row(store, tmp_path):
    a = _fits(store, tmp_path / "a")
    b = _fits(store, tmp_path / "b", "--skip-positions", "3")
    for row_a, row_b in zip(a["table1"], b["table1"]):
        assert row_b["n_tokens"] == row_a["n_tokens"] - 2 * 3          # 2 sequences
        assert row_b["n_modes_all_stable"] < row_a["n_modes_all_stable"]


def test_config_section_reaches_analyze_the_summary_and_the_live_view(tmp_path):
    path = tmp_path / "c.zarr"
    write_store(path, [synthetic_model(rows=1, lmax=16, d=24, n_ir=12, seed=3)])
    zarr.open_group(str(path), mode="r+").attrs["analysis"] = {
        "window": ["1e-3", "5e-2"], "level": 0.8, "n_boot": 30, "seed": 4, "skip_positions": 1}
    text = summary_text(path)
    assert "token positions done t ≥ 1" in text and "on [0.001, 0.05], 80% CI of 30 replicates" in text
    render_live(path, tmp_path / "live.png")
    live = json.loads((tmp_path / "live.json").read_text())
    assert live["window"] == [1e-3, 5e-2] and "t ≥ 1" in live["method"]
    fits = _fits(path, tmp_path, "--level", "0.95")                   # the flag wins
    assert fits["table1"][0]["n_tokens"] == 2 * (16 - 1)
    doc = json.loads((tmp_path / "rep" / "fits.json").read_text())
    assert doc["settings"] == {"window": [1e-3, 5e-2], "level": 0.95, "n_boot": 40,
                               "modes": "all-stable", "lengths": [16], "layer": None,
                               "skip_positions": 1, "seed": 4, "memory_window": None,
                               "primary": None}


@pytest.mark.parametrize("bad, field", [({"window": (5e-2, 1e-4)}, "analysis.window"),
                                        ({"level": 1.0}, "analysis.level"),
                                        ({"n_boot": 5}, "analysis.n_boot"),
                                        ({"modes": "every"}, "analysis.modes"),
                                        ({"primary": "ols:all-stable"}, "analysis.primary"),
                                        ({"skip_positions": -1}, "analysis.skip_positions"),
                                        ({"memory_window": [8, 2]}, "analysis.memory_window")])
def test_bad_settings_name_their_field(bad, field):
    with pytest.raises(SettingsError, match=field):
        Settings(**bad)


def test_bad_flag_is_one_line(store, capsys):
    assert main([str(store), "--level", "2", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "analysis.level" in err


def test_paper_values_only_where_model_layer_and_window_match(tmp_path):
    from analysis.studies.paper import NOTE, note, reference
    s = Settings()
    assert reference({"path": "state-spaces/mamba-370m"}, 24, s)[128] == -0.165
    assert reference({"path": "state-spaces/mamba-370m"}, 2, s) == {}
    assert reference({"path": "checkpoints/tiny-mamba-bytes"}, 24, s) == {}
    assert reference({"path": "state-spaces/mamba-370m"}, 24, Settings(window=(1e-3, 5e-2))) == {}
    path = tmp_path / "m.zarr"
    write_store(path, [synthetic_model(rows=1, lmax=16, d=24, n_ir=12, seed=5)])
    assert main([str(path), "--out", str(tmp_path / "r"), "--n-boot", "20", "--quiet"]) == 0
    report = (tmp_path / "r" / "report.md").read_text()
    # issue 57: the papers' note only where it applies (their checkpoints in another setting),
    # never in a toy model's report
    assert NOTE not in report and "paper β" not in (tmp_path / "r" / "table1.md").read_text()
    assert note({"path": "state-spaces/mamba-370m"}, 2, s) == NOTE
    assert note({"path": "state-spaces/mamba-370m"}, 24, s) is None          # a column instead
    assert note({"path": "checkpoints/tiny-llama"}, 24, s) is None
