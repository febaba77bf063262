"""The declared study on a real store (analysis/studies/study.py): a 4-layer LLaMA saved with
save_pretrained, swept with two random_init and two shuffled nulls and a `depth:` walk through
the real sweep on a real LocalCluster, then its root attribute `study` written through zarr as
Study.record makes it (the config's `study:` section that records it at sweep start is being
added by the engineer "config"; until it lands the test writes the attribute itself).

The family is exactly the declared tests; every row says what it counted; β on 20 tokens of a
d = 32 model falls short of its minimum and reads "not enough data" with no verdict; a
declaration replaced after the data says so; every declarable name has one measuring function.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import zarr
from conftest import local_client
from families import tiny_model

from analysis.studies.declarable import DECLARABLE
from analysis.studies.study import declared_study, moved_windows
from analysis.studies.verdicts import CODES
from sweep.config.load import config_from_dict
from sweep.format.study import HISTORY, OBSERVABLES, STUDY, Study
from sweep.run import run_sweep

DECLARED = Study(layers=(2, 1), observables=tuple(OBSERVABLES), against=("random_init", "shuffled"),
                 level=0.9)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    tiny_model("llama", torch.Generator().manual_seed(1)).save_pretrained(root / "llama")
    doc = {"model": {"path": str(root / "llama"), "name": "llama",
                     "nulls": {"random_init": 2, "shuffled": 2}},
           "inputs": {"sequences": 2, "length": 10, "seed": 3}, "layers": "all",
           "store": str(root / "s.zarr"), "compute": {"token_block": 5, "live_every": 0},
           "depth": {"spans": [2]}}
    with local_client(1) as client:
        assert run_sweep(config_from_dict(doc), client=client, progress=False).exit_code == 0
    return root / "s.zarr"


def _declare(path, *studies, after_data=False):
    g = zarr.open_group(str(path), mode="r+")
    recs = [s.record(f"2026-12-0{i + 1}T00:00:00+00:00", after_data and i == len(studies) - 1)
            for i, s in enumerate(studies)]
    g.attrs[STUDY], g.attrs[HISTORY] = recs[-1], recs


def test_every_declarable_name_has_one_measuring_function():
    assert set(DECLARABLE) == set(OBSERVABLES)
    assert all(DECLARABLE[n].name == n for n in DECLARABLE)


def test_the_family_is_exactly_the_declared_tests(store):
    _declare(store, DECLARED)
    result = declared_study(store)
    assert [(r.observable, r.layer, r.kind) for r in result.rows] == DECLARED.tests()
    assert {r.model for r in result.rows} == {"llama"}
    doc = json.loads(json.dumps(result.to_dict()))          # fits.json's `study`, as JSON
    assert doc["declaration"] == DECLARED.declaration() and doc["id"] == DECLARED.id
    assert doc["level"] == 0.9 and doc["status"] == "declared before the data"
    assert doc["changed"] is False
    for row in doc["rows"]:
        assert row["verdict"] in CODES and row["sequences"] == 2 and row["n_nulls"] == 2
        assert set(row) >= {"observable", "layer", "kind", "trained", "null_mean", "delta", "ci",
                            "p", "p_method", "p_holm", "verdict", "resampled"}
    counted = [r for r in doc["rows"] if r["verdict"] != "not enough data"]
    assert doc["m"] == len(counted) > 0
    assert all(r["p_method"] == "t(1)" and r["p_holm"] >= r["p"] for r in counted)


def test_too_few_modes_for_beta_is_not_enough_data_and_no_verdict(store):
    _declare(store, DECLARED)
    result = declared_study(store)
    beta = [r for r in result.rows if r.observable == "beta"]
    assert beta and all(r.code == "not enough data" for r in beta)
    assert all(r.trained.check.n < 500 and r.trained.check.needs == 500 for r in beta)
    assert all(not r.windows for r in beta)                # no range tested from a short window
    sentences = [v for v in result.verdicts() if v["observable"] == "beta"]
    for v in sentences:
        assert v["category"] == "not enough data"
        assert "needs 500" in v["sentence"] and "nan" not in v["sentence"]
        assert not any(w in v["sentence"] for w in ("differs", "no difference shown"))
    assert all("nan" not in v["sentence"] for v in result.verdicts())


def test_a_declaration_replaced_after_the_data_says_so(store):
    first = Study(layers=(1,), observables=("beta", "density"), against=("random_init",))
    _declare(store, first, DECLARED, after_data=True)
    result = declared_study(store)
    assert result.changed and result.status == "declared after the data"
    assert [h["id"] for h in result.to_dict()["history"]] == [first.id, DECLARED.id]
    assert all(v["sentence"].endswith("(declared after the data).") for v in result.verdicts())


def test_a_kind_the_store_lacks_is_not_enough_data(store):
    _declare(store, Study(layers=(1,), observables=("beta", "density"), against=("gaussian",)))
    rows = declared_study(store).rows
    assert [r.code for r in rows] == ["not enough data"] * 2
    assert rows[1].check.to_dict() == {"estimate": "t_interval", "n": 0, "needs": 2,
                                       "counts": "nulls of the kind", "enough": False}


def test_no_declaration_no_study(store):
    g = zarr.open_group(str(store), mode="r+")
    g.attrs.pop(STUDY, None)
    assert declared_study(store) is None


def test_the_window_factors_move_each_edge():
    got = moved_windows((1e-4, 5e-2))
    assert [(e, f) for e, f, _ in got] == [(e, f) for e in ("lo", "hi") for f in (0.25, 0.5, 2.0, 4.0)]
    assert all(math.isclose(w[0], 1e-4 * f) for e, f, w in got if e == "lo")
    assert all(np.isclose(w[1], 5e-2 * f) and w[0] == 1e-4 for e, f, w in got if e == "hi")


def test_the_python_api_says_not_enough_data_on_the_tiny_sweep(store):
    """`st.beta` and `null_study` on the same tiny store: no "nan" beside a verdict word."""
    from analysis.io.store import open_store
    from analysis.studies.nulls import null_study
    from analysis.studies.primary import primary_of, store_settings

    st = open_store(store, "llama")
    h = st.beta(2)
    assert h.fitted and not h.check.ok
    assert h.value() == h.check.text == f"not enough data (n = {h.n_modes:,} stable modes in the window, needs 500)"
    assert h.reads_as == h.check.text and not h.power_law_rejected
    assert h.to_dict()["check"]["enough"] is False
    s = store_settings(st).replace(n_boot=20)
    study = null_study(st, 2, 10, s, primary_of(st, s))
    beta = [c for c in study.comparisons if c.observable.startswith("β")]
    assert beta and all(c.verdict.startswith("not enough data (n = ") for c in beta)
    doc = json.loads(json.dumps(study.to_dict()))
    for c in doc["comparisons"]:
        assert "nan" not in c["verdict"]
        assert c["check"]["enough"] or c["verdict"].startswith("not enough data")


def test_one_call_measures_the_study_section_for_fits_json(store):
    from analysis.studies.study_section import measure_study

    _declare(store, DECLARED)
    doc = json.loads(json.dumps(measure_study(store).to_dict()))
    assert set(doc) == {"study", "positions_dropped", "density_shape", "beta_by_position",
                        "precision_of_observables"}
    assert doc["study"]["id"] == DECLARED.id and doc["precision_of_observables"] == []
    assert doc["positions_dropped"]["text"].endswith("llama records no BOS rule")
    shape = doc["density_shape"]["llama"]
    assert set(shape["nulls"]) == {"random_init", "shuffled"} and shape["exploratory"]
    bins = doc["beta_by_position"]["llama"]["bins"]
    assert [(b["start"], b["stop"]) for b in bins] == [(0, 8), (8, 10)]
    assert all(b["enough"] is False and b["needs"] == 500 for b in bins)   # a tiny sweep
