"""Δβ of two models with a CI and a verdict: calibrated on synthetic models of known β, and
`tdos compare` end to end on stores written by the engine's writer."""
import json

import numpy as np
from synthetic_store import synthetic_model, write_store

from analysis import bootstrap_ir_exponent
from analysis.studies.compare import delta_beta_interval
from sweep.cli import main

W = (1e-4, 5e-2)


def tokens(rng, beta, n_tok=256, nseq=2, d=64):
    """Per-token rates, density ∝ λ^β on (0, 0.1] (a pure power law from 0: both β agree)."""
    lam = 0.1 * rng.random((nseq * n_tok, d)) ** (1 / (1 + beta))
    return list(lam), np.repeat(np.arange(nseq), n_tok)


def verdicts(beta_a, beta_b, n_sets, n_tok, seed0, nseq=2):
    out = []
    for i in range(n_sets):
        rng = np.random.default_rng(seed0 + i)
        (a, seq), (b, _) = tokens(rng, beta_a, n_tok, nseq), tokens(rng, beta_b, n_tok, nseq)
        A = bootstrap_ir_exponent(a, W, n_boot=300, seed=0, seq=seq)
        B = bootstrap_ir_exponent(b, W, n_boot=300, seed=1, seq=seq)
        d, lo, hi = delta_beta_interval(A, B, 0.9)
        out.append(lo <= 0 <= hi)
    return np.array(out)


def test_equal_betas_agree_in_about_90_percent_of_sets():
    """150 pairs of models with β = −0.2 each (2 × 256 tokens × 64 modes): the share that
    agree at 90 % lies within 0.90 ± 0.07 (3 binomial standard deviations)."""
    agree = verdicts(-0.2, -0.2, 150, 256, 1000)
    assert 0.83 <= agree.mean() <= 0.97, agree.mean()


def test_a_difference_of_0_1_with_enough_modes_differs():
    """Δβ = 0.1 with 8 × 128 tokens × 64 modes per model: "differ" in at least 19 of 20 sets
    (the jackknife over sequences has 7 degrees of freedom to learn its spread from)."""
    assert (~verdicts(-0.2, -0.1, 20, 128, 5000, nseq=8)).sum() >= 19


def test_tdos_compare_writes_the_report_of_two_stores(tmp_path, capsys):
    a = synthetic_model(name="mamba-syn", beta=-0.2, rows=2, lmax=32, d=48, n_ir=24, seed=1)
    b = synthetic_model(name="neox-syn", arch="gpt_neox", beta=-0.2, rows=2, lmax=32, d=48,
                        n_ir=24, seed=2)
    write_store(tmp_path / "a.zarr", [a])
    write_store(tmp_path / "b.zarr", [b])
    out = tmp_path / "cmp"
    assert main(["compare", f"{tmp_path / 'a.zarr'}:mamba-syn", str(tmp_path / "b.zarr"),
                 "--out", str(out), "--n-boot", "50"]) == 0       # its lines are read below
    for f in ("compare.md", "compare.json", "compare_beta.png", "compare_delta.png",
              "compare_tdos.png", "compare_kernel.png"):
        assert (out / f).stat().st_size > 1000, f
    doc = json.loads((out / "compare.json").read_text())
    assert [m["name"] for m in doc["models"]] == ["mamba-syn", "neox-syn"]
    assert doc["settings"]["n_boot"] == 50 and doc["settings"]["window"] == list(W)
    pairs = doc["pairs"]
    assert {p["modes"] for p in pairs} == {"all-stable", "symmetry-removed"}
    assert {p["L"] for p in pairs} >= {8, 16, 32}
    for p in pairs:
        lo, hi = p["ci"]
        assert lo <= p["delta_beta"] <= hi
        # alone, a CI is uncorrected: it never says "differ" (only a Holm-corrected p does)
        assert p["verdict"] == ("no difference shown at 90 %" if lo <= 0 <= hi
                                else "CI excludes 0 (uncorrected)")
    fam = doc["family"]
    assert fam["tests"] and all(t["p_method"].startswith("t(") or t["p_method"] == "normal"
                                for t in fam["tests"])
    for t in fam["tests"]:                   # the family p agrees with its interval
        lo, hi = t["ci"]
        assert (t["p_raw"] < 0.1) == (not lo <= 0 <= hi), t
    md = (out / "compare.md").read_text()
    assert "Δβ" in md and "| p from |" in md and "(the paper's estimator)" not in md
    # the power law's GOF per model decides whether the β tests are window-slope tests
    assert set(doc["gof_p"]) == {"mamba-syn", "neox-syn"}
    rejected = any(p < 0.1 for p in doc["gof_p"].values())
    assert doc["beta_tests_read_as"] == ("window-slope tests" if rejected else "exponent tests")
    assert ("**window-slope test**" in md) == rejected
    names = [t["name"] for t in fam["tests"]]
    assert any(n.startswith("Δ window slope β" if rejected else "Δβ ") for n in names)
    (dens,) = doc["density_pairs"]                          # the window mode density, paired
    assert dens["ci"][0] <= dens["delta_density"] <= dens["ci"][1] and dens["p_method"].startswith("t(")
    assert any(n.startswith("Δ window mode density") for n in names)
    printed = capsys.readouterr().out
    assert "mamba-syn (layer 2) − neox-syn (layer 2)" in printed and "comparison:" in printed
    # fp32: each side's all-stable β counts what Table I counts above the resolution floor, and
    # says which floor (here the dtype table's, labelled fp64-only: no fp64 twin measured one)
    from analysis import aggregate, open_store
    from analysis.studies.tables import ir_row
    from sweep.format.settings import Settings

    side = doc["models"][0]
    assert side["all_stable_floor"]["lambda"] > 0 and "fp64-only" in side["all_stable_floor"]["why"]
    assert "the all-stable count leaves out stable modes below" in md
    st = open_store(tmp_path / "a.zarr", "mamba-syn")
    row, _ = ir_row(st, aggregate(str(tmp_path / "a.zarr")).model("mamba-syn"), 2, 32,
                    Settings(n_boot=50))
    (at32,) = [p for p in side["beta_vs_L"]["all-stable"] if p["key"] == 32]
    assert at32["beta"] == row.by_mode["all-stable"].beta


def test_compare_of_one_model_is_refused_in_one_line(tmp_path, capsys):
    write_store(tmp_path / "a.zarr", [synthetic_model(rows=1, lmax=16, d=24, n_ir=12)])
    assert main(["compare", str(tmp_path / "a.zarr"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "at least two models" in err


def test_compare_picks_each_models_representative_layer_as_tdos_analyze_does(tmp_path):
    """One rule (analysis.studies.primary.representative) for the comparison and the report:
    analysis.layer when stored, else the paper's layer 24 when stored, else the middle stored
    layer; store rows out of layer order (a grown store) change none of it."""
    from analysis import open_store
    from analysis.studies.compare import model_sides, resolve
    from analysis.studies.primary import representative
    from sweep.format.settings import Settings

    kw = {"arch": "gpt_neox", "rows": 3, "lmax": 16, "d": 24, "n_ir": 12}
    paper = synthetic_model(name="paper", layers=[30, 2, 24], seed=1, **kw)
    middle = synthetic_model(name="middle", layers=[7, 1, 4], seed=2, **kw)
    write_store(tmp_path / "s.zarr", [paper, middle])
    resolved = resolve([tmp_path / "s.zarr"])
    for layer, want in ((None, [24, 4]), (7, [24, 7]), (2, [2, 4]), (5, [24, 4])):
        s = Settings(n_boot=20, layer=layer)
        assert [side.layer for side in model_sides(resolved, s)] == want, layer
        assert [representative(open_store(p, n), settings=s)[0] for _, p, n in resolved] == want
