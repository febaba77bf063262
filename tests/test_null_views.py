"""Null models in the progress views: `tdos status`, its spectral summary, the live figure and
the /tdos page list the trained models, each with its nulls folded under it (docs/nulls.md).
Stores are written through the real writer (synthetic_store.null_models)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from matplotlib.collections import PolyCollection

from analysis.io.aggregate import aggregate
from analysis.io.store import open_store
from analysis.views.live import live_figure, live_snapshot, render_live
from analysis.views.summary import format_summary, summary_rows
from cluster.page import render
from sweep.cli import main
from sweep.format.variants import folded
from sweep.format.settings import Settings
from sweep.store.ledger import status_rows, variant_rows
from synthetic_store import null_models, planned_mask, synthetic_model, write_store

KW = dict(nseq=2, lmax=16, d=32, n_ir=16)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Trained `a` (2 layers) with two random_init nulls and one shuffled, the first null half
    done (its second sequence pending, one block flagged); trained `b` without nulls."""
    a = synthetic_model("a", "attention", -0.2, rows=2, **KW)
    b = synthetic_model("b", "attention", -0.2, rows=2, seed=7, **KW)
    nulls = (null_models(a, -0.5, n=2, **KW)
             + null_models(a, -0.5, n=1, kind="shuffled", seed=200, **KW))
    half = planned_mask(nulls[0])
    half[:, 1] = 0
    half[0, 0, 0] = 2
    path = write_store(tmp_path_factory.mktemp("nv") / "s.zarr", [a, *nulls, b],
                       done={nulls[0].name: half})
    # 2 layers x 2 sequences x 2 blocks per model: the nulls hold 3 x 8, of which 4 pending
    return path, {"planned": 24, "done": 20, "flagged": 1}


def test_families_list_each_trained_model_with_its_nulls(store):
    path, _ = store
    st = open_store(path)
    assert folded(st.root, "null") == {"a": ["a.random_init.0", "a.random_init.1", "a.shuffled.0"],
                                      "b": []}


def test_status_has_rows_of_trained_models_and_one_null_line_each(store, capsys):
    path, want = store
    assert {r["model"] for r in status_rows(path)} == {"a", "b"}
    n = variant_rows(path, "null")
    assert set(n) == {"a"}
    assert (n["a"]["done"], n["a"]["flagged"], n["a"]["total"]) == (want["done"], want["flagged"],
                                                                  want["planned"])
    assert n["a"]["kinds"] == {"random_init": [0, 1], "shuffled": [0]} and n["a"]["complete"] == 2
    assert main(["status", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert not any(ln.startswith("a.") for ln in lines)                 # no null as a model
    rows_a = [i for i, ln in enumerate(lines) if ln.startswith("a ")]
    assert len(rows_a) == 2                                            # one per layer
    (null_line,) = [ln for ln in lines if ln.lstrip().startswith("+ nulls")]
    assert lines.index(null_line) == rows_a[-1] + 1                    # right under its model
    assert null_line == ("  + nulls: 3 models (random_init 0, 1; shuffled 0): 20/24 blocks done, "
                         "1 flagged, 2 of 3 complete")


def test_spectral_summary_folds_the_nulls_into_a_beta_range(store):
    path, _ = store
    rows = summary_rows(path, Settings(n_boot=20))
    assert [(r["model"], r["layer"], "nulls" in r) for r in rows] == [
        ("a", 0, False), ("a", 2, False), ("a", 0, True), ("a", 2, True), ("b", 0, False), ("b", 2, False)]
    for r in (r for r in rows if "nulls" in r):
        assert r["nulls"] == 3 and r["fitted"] == 3
        # 16 tokens a sequence; the half-done null has one sequence of 2, and its flagged
        # block (8 tokens, layer 0) reads as NaN, as in the trained rows' token counts
        assert r["tokens"] == 16 * (2 + 2 + 1) - (8 if r["layer"] == 0 else 0)
        lo, hi = r["beta_range"]                                       # primary β of each null
        assert -0.75 < lo <= hi < -0.3                                  # the nulls' β = −0.5
    text = format_summary(rows)
    assert text.count("+ 3 nulls") == 2 and "a.random_init" not in text


def test_live_figure_draws_trained_models_only_with_their_null_band(store, tmp_path):
    path, _ = store
    st = open_store(path)
    fig = live_figure(st, aggregate(path), Settings())
    assert len(fig.axes) == 2 * 2                                       # a and b, two panels each
    titles = [ax.get_title() for ax in fig.axes]
    assert not any("random_init" in t or "shuffled" in t for t in titles)
    band_a = [c for c in fig.axes[1].collections if isinstance(c, PolyCollection)]
    assert len(band_a) == 1 and "3 nulls" in band_a[0].get_label()
    assert not [c for c in fig.axes[3].collections if isinstance(c, PolyCollection)]   # b: none
    render_live(path, tmp_path / "live.png")
    assert set(json.loads((tmp_path / "live.json").read_text())["betas"]) == {"a", "b"}


def test_snapshot_and_page_count_the_nulls_under_their_model(store, tmp_path):
    path, want = store
    render_live(path, tmp_path / "live.png")
    snap = live_snapshot(path, running=True, png=tmp_path / "live.png")
    assert [m["name"] for m in snap["models"]] == ["a", "b"]
    a, b = snap["models"]
    assert a["nulls"]["counts"] == {"done": want["done"], "flagged": want["flagged"],
                                    "total": want["planned"]}
    assert b["nulls"]["models"] == [] and a["counts"]["total"] == b["counts"]["total"] == 8
    assert snap["verdict"] == "36/40 blocks done (nulls included: 20/24)"
    page = render([snap])
    assert page.count("<h3>") == 2 and "a.random_init" not in page
    assert "+ nulls: 3 models (random_init 0, 1; shuffled 0): 20/24 blocks done, 1 flagged" in page
    b0 = a["layers"][0]["beta"]                                        # the store's primary β
    assert snap["primary"] == "mle:symmetry-removed" and np.isfinite(b0["beta"])
    assert f"{b0['beta']:+.3f} [{b0['lo']:+.3f}, {b0['hi']:+.3f}] at L = {b0['L']}" in page
