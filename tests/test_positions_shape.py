"""Positions, the density's shape and fp32 − fp64 on stores of known content written through
the real writer: `skip_positions: auto` drops position 0 exactly where a model's inputs record a
BOS there and says how many positions left (analysis/studies/positions.py); β per position bin
follows a β that changes with t; the local exponent per half-decade recovers each model's law and
draws each null kind as its own band (studies/shape.py); every declarable observable of an fp32
and fp64 twin gets its difference with a paired interval (studies/precision_study.py)."""
from __future__ import annotations

import dataclasses
import json

import matplotlib
import numpy as np
import pytest
import zarr
from synthetic_store import null_models, synthetic_model, write_store

from analysis.io.store import open_store
from analysis.studies.positions import beta_by_position, bos_rule, position_bins, resolve_skip
from analysis.studies.precision_study import precision_study
from analysis.studies.primary import primary_beta, store_settings
from analysis.studies.shape import density_shape
from sweep.format.settings import Primary, Settings

matplotlib.use("Agg")
PRIMARY = Primary("mle", "symmetry-removed", "the test's")
KW = dict(nseq=4, lmax=64, d=64, n_ir=48)


def _bos(path, name, value=True):
    g = zarr.open_group(str(path), mode="r+")[name]
    g.attrs["inputs"] = {**g.attrs["inputs"], "position0_is_bos": value}


def test_auto_drops_position_zero_where_the_inputs_put_a_bos(tmp_path):
    a = synthetic_model("a", "attention", -0.2, rows=1, **KW)
    path = write_store(tmp_path / "s.zarr", [a])
    st = open_store(path, "a")
    rule = bos_rule(st, Settings())
    assert (rule.skip, rule.unknown) == (0, ("a",)) and "no BOS rule" in rule.text
    _bos(path, "a")
    st = open_store(path, "a")
    rule = bos_rule(st, Settings())
    assert rule.skip == 1 and rule.dropped == {"a": 4} and rule.bos_models == ("a",)
    assert rule.text.startswith("position t < 1 left out of every number (auto: a starts each "
                                "sequence with a BOS): 4 token positions dropped")
    assert store_settings(st).skip_positions == 1                     # the store's default
    assert resolve_skip(Settings(skip_positions=0), st).skip_positions == 0     # as given
    auto, kept = primary_beta(st, 0, 64), primary_beta(st, 0, 64, Settings(skip_positions=0))
    assert auto.n_modes < kept.n_modes
    assert auto.n_modes == primary_beta(st, 0, 64, Settings(skip_positions=1)).n_modes


def test_position_bins_double_from_the_first_kept_position():
    assert position_bins(1, 64) == [(1, 8), (8, 16), (16, 32), (32, 64)]
    assert position_bins(0, 12) == [(0, 8), (8, 12)]
    assert position_bins(9, 40) == [(9, 16), (16, 32), (32, 40)]


def test_beta_per_position_bin_follows_a_beta_that_changes_with_t(tmp_path):
    early = synthetic_model("a", "attention", -0.6, rows=1, seed=1, **KW)
    late = synthetic_model("a", "attention", -0.1, rows=1, seed=2, **KW)
    ev = early.eigenvalues.copy()
    ev[:, :, 16:] = late.eigenvalues[:, :, 16:]
    path = write_store(tmp_path / "p.zarr", [dataclasses.replace(early, eigenvalues=ev)])
    bins = beta_by_position(open_store(path, "a"), 0, 64, Settings(n_boot=50, skip_positions=0), PRIMARY)
    assert bins.bins == ((0, 8), (8, 16), (16, 32), (32, 64))
    values = [m.value for m in bins.values]
    assert all(m.check.ok for m in bins.values)
    assert values[0] == pytest.approx(-0.6, abs=0.12) and values[3] == pytest.approx(-0.1, abs=0.12)
    assert bins.values[1].hi < bins.values[2].lo                      # the step at t = 16 shows
    doc = json.loads(json.dumps(bins.to_dict()))
    assert doc["exploratory"] and doc["bins"][0]["needs"] == 500
    assert bins.plot().get_xlabel().startswith("token position")


def test_the_density_shape_recovers_each_law_and_bands_each_kind(tmp_path):
    a = synthetic_model("a", "attention", -0.2, rows=1, **KW)
    nulls = null_models(a, -0.7, n=3, **KW) + null_models(a, 0.3, n=2, kind="shuffled", seed=50, **KW)
    path = write_store(tmp_path / "d.zarr", [a, *nulls])
    shape = density_shape(open_store(path, "a"), 0, 64, Settings(n_boot=50, skip_positions=0), PRIMARY)
    assert len(shape.centers) == 5 and set(shape.nulls) == {"random_init", "shuffled"}
    ok = [n >= 10 for n in shape.trained.n_modes]
    assert sum(ok) >= 3
    assert np.nanmean(shape.trained.beta[ok]) == pytest.approx(-0.2, abs=0.15)
    for kind, beta in (("random_init", -0.7), ("shuffled", 0.3)):
        low, mean, high = shape.band(kind)
        assert np.nanmean(mean) == pytest.approx(beta, abs=0.2)
        assert (np.nan_to_num(low, nan=0) <= np.nan_to_num(high, nan=0)).all()
    doc = json.loads(json.dumps(shape.to_dict()))
    assert doc["exploratory"] and len(doc["nulls"]["shuffled"]["members"]) == 2
    assert len(shape.plot().get_legend().get_texts()) == 3


def test_fp32_minus_fp64_of_every_declarable_observable(tmp_path):
    kw = dict(rows=1, nseq=3, lmax=32, d=48, n_ir=32)
    a64 = dataclasses.replace(synthetic_model("m64", "attention", -0.2, dtype="float64", **kw),
                              path="same/checkpoint")
    a32 = dataclasses.replace(a64, name="m32", dtype="float32",
                              eigenvalues=a64.eigenvalues.astype(np.complex64) * (1 + 1e-6))
    path = write_store(tmp_path / "f.zarr", [a64, a32])
    (study,) = precision_study(path, Settings(n_boot=50, skip_positions=0))
    assert (study.reference, study.other, study.same_tokens) == ("m64", "m32", True)
    rows = {r.observable: r for r in study.rows}
    assert set(rows) == {"beta", "density", "tail_width", "log_frobenius", "nonnormality",
                         "alignment", "kernel_nonnormality"}
    for name in ("density", "tail_width"):
        r = rows[name]
        assert r.diff.check.ok and "paired over 3 sequences" in r.diff.p_method
        assert abs(r.diff.delta) < 0.05 and r.diff.lo <= r.diff.delta <= r.diff.hi
    assert not rows["alignment"].diff.check.ok                 # no depth walk in this store
    doc = json.loads(json.dumps(study.to_dict()))
    assert doc["exploratory"] and doc["rows"][0]["difference"] == "other − reference"


def test_skip_positions_reads_auto_or_a_number():
    from sweep.format.settings import AUTO, SettingsError

    s = Settings.from_store({"analysis": {"skip_positions": "auto"}})
    assert s.skip_positions is AUTO and s.skip_positions == 0      # unresolved: every position
    assert s.to_dict()["skip_positions"] == "auto" and "(auto)" in s.describe()
    assert (s.resolve_skip(True).skip_positions, s.resolve_skip(False).skip_positions) == (1, 0)
    assert Settings(skip_positions=3).resolve_skip(True).skip_positions == 3
    with pytest.raises(SettingsError, match=r"^analysis\.skip_positions: must be auto or an integer"):
        Settings(skip_positions="first")


def test_analyze_draws_the_shape_and_positions_of_each_model_with_its_study(tmp_path):
    """`tdos analyze` renders the study's exploratory picture per model (render computes
    nothing: the figure draws the measured shape and bins), and the report lists it."""
    from analysis.cli import main

    a = synthetic_model("a", "attention", -0.2, rows=1, **KW)
    path = write_store(tmp_path / "r.zarr", [a, *null_models(a, -0.7, n=3, **KW)])
    assert main([str(path), "--out", str(tmp_path / "rep"), "--n-boot", "20", "--quiet"]) == 0
    assert (tmp_path / "rep" / "shape_and_positions.png").stat().st_size > 10_000
    assert "shape_and_positions.png" in (tmp_path / "rep" / "report.md").read_text()
