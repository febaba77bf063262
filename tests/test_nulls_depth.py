"""β and the window mode density against the nulls at every swept layer, one family
(analysis/studies/nulls_depth.py): on synthetic stores of known law, written through the real
writer, the random_init nulls (β = −0.7) differ from the model (β = −0.2) at every layer and
the shuffled ones (β = −0.2) at none, after Holm over all layers."""
from __future__ import annotations

import json

import numpy as np

from synthetic_store import null_models, synthetic_model, write_store

KW = dict(nseq=4, lmax=16, d=32, n_ir=16)


def _store(tmp_path):
    a = synthetic_model("a", "attention", -0.2, rows=3, **KW)
    nulls = null_models(a, -0.7, n=4, **KW) + null_models(a, -0.2, n=4, kind="shuffled", seed=300, **KW)
    return write_store(tmp_path / "s.zarr", [a, *nulls])


def test_each_layer_against_each_kind_in_one_family(tmp_path):
    from analysis.io.store import open_store
    from analysis.studies.nulls_depth import depth_null_study
    from sweep.format.settings import Primary, Settings

    st = open_store(_store(tmp_path), "a")
    study = depth_null_study(st, 16, Settings(n_boot=20, lengths=(16,)),
                             Primary("mle", "symmetry-removed", "the test's"), window_slope=False)
    assert study.layers == [0, 2, 4]
    betas = [(ly, c) for ly, c in study.rows if c.observable.startswith("β")]
    assert sorted({(ly, c.kind) for ly, c in betas}) == [(ly, k) for ly in (0, 2, 4)
                                                         for k in ("random_init", "shuffled")]
    assert study.family.m == len(study.rows) >= 6
    for ly, c in betas:
        assert c.sequences == 4 and len(c.nulls) == 4 and c.p_method == "t(3)"
        assert c.p_adjusted >= c.p_raw
        if c.kind == "random_init":
            assert abs(c.delta - 0.5) < 0.2 and c.verdict.startswith("distinguishable"), (ly, c.to_dict())
        else:
            assert abs(c.delta) < 0.2 and c.verdict.startswith("no difference"), (ly, c.to_dict())


def test_analyze_writes_the_family_the_table_and_the_figure(tmp_path):
    from analysis.report.analyze import analyze
    from sweep.format.settings import Settings

    analyze(_store(tmp_path), tmp_path / "r", Settings(n_boot=20, lengths=(16,)), progress=False)
    doc = json.loads((tmp_path / "r" / "fits.json").read_text())["models"]["a"]
    across = doc["nulls_across_depth"]
    assert across["layers"] == [0, 2, 4] and across["family"]["m"] == len(across["rows"])
    assert doc["nulls"]["family_m"] != across["family"]["m"]       # the report's family is its own
    row = next(r for r in across["rows"] if r["layer"] == 4 and r["kind"] == "random_init"
               and "β" in r["observable"])
    assert np.isfinite(row["p_adjusted"]) and row["p_method"] == "t(3)"
    md = (tmp_path / "r" / "report.md").read_text()
    assert "Against its nulls across depth (layers 0, 2, 4)" in md
    assert "**nulls_across_depth.png** — the primary β and the window mode density" in md
    assert (tmp_path / "r" / "nulls_across_depth.png").stat().st_size > 10_000


def test_one_shared_layer_gives_no_study(tmp_path):
    from analysis.io.store import open_store
    from analysis.studies.nulls_depth import depth_null_study
    from sweep.format.settings import Primary, Settings

    a = synthetic_model("a", "attention", -0.2, rows=1, **KW)
    path = write_store(tmp_path / "one.zarr", [a, *null_models(a, -0.7, n=2, **KW)])
    assert depth_null_study(open_store(path, "a"), 16, Settings(n_boot=20, lengths=(16,)),
                            Primary("mle", "symmetry-removed", ""), False) is None
