"""Issue 42, analysis half: each observable against its nulls, the primary estimator, and
verdicts counted in a family (Holm). Nulls are written through the real writer
(synthetic_store.null_models): groups carrying the attribute null = {of, kind, seed}."""
import dataclasses
import json

import numpy as np
import pytest
from scipy import stats

from analysis.fit.fits import mle_ir_exponent, solve_s, var_u
from analysis.fit.multiplicity import Family, holm, interval_p
from analysis.fit.resampling import verdict
from analysis.io.store import open_store
from analysis.report.analyze import analyze
from analysis.report.markdown import headline_lines
from analysis.studies.nulls import null_study
from sweep.format.settings import Settings, SettingsError
from synthetic_store import null_models, power_law_rates, synthetic_model, write_store

WINDOW = (1e-4, 5e-2)
Z90 = stats.norm.ppf(0.95)


def test_holm_is_the_step_down_of_its_definition():
    p = np.array([0.01, 0.04, 0.03, 0.2, np.nan])
    # sorted 0.01, 0.03, 0.04, 0.2 times 4, 3, 2, 1 → 0.04, 0.09, 0.08→0.09 (monotone), 0.2
    np.testing.assert_allclose(holm(p)[:4], [0.04, 0.09, 0.09, 0.2])
    assert np.isnan(holm(p)[4])


def test_a_family_of_one_gives_the_interval_verdict():
    for d, lo, hi in ((0.3, 0.01, 0.5), (0.3, -0.01, 0.5), (-0.2, -0.4, -0.001), (-0.2, -0.4, 0.02)):
        f = Family("one", {"tests": 1}, 0.9)
        f.add("x", d, lo, hi)
        t = f.correct().tests[0]
        assert t.p_raw == t.p_adjusted == pytest.approx(interval_p(d, lo, hi, 0.9))
        excludes = not lo <= 0 <= hi
        assert verdict(lo, hi, 0.9) == ("CI excludes 0 (uncorrected)" if excludes
                                        else "no difference shown at 90 %")
        assert t.verdict(0.9) == ("differ" if excludes else "no difference shown at 90 %"), (d, lo, hi)


def _betas(rng, betas, n):
    """In-window MLE β and Fisher se of n i.i.d. power-law rates per entry of `betas`: the
    estimator of mle_ir_exponent (solve_s, var_u) on every data set at once."""
    lo, hi = WINDOW
    w = np.log(hi / lo)
    r = np.stack([power_law_rates(rng, n, b, hi) for b in betas])           # (sets, n)
    inside = r >= lo
    u = np.where(inside, np.log(np.where(inside, r, lo) / lo), 0.0)
    k = inside.sum(1)
    s = solve_s(u.sum(1) / k, w)
    return s - 1, 1 / np.sqrt(k * var_u(s, w))


def _family(rng, shifts, n=1500):
    """len(shifts) comparisons of two models of β −0.2 + shift and −0.2, Holm-corrected."""
    fam = Family("simulation", {"comparisons": len(shifts)}, 0.9)
    a, sa = _betas(rng, -0.2 + np.asarray(shifts), n)
    b, sb = _betas(rng, np.full(len(shifts), -0.2), n)
    se = np.hypot(sa, sb)
    for s, d, e in zip(shifts, a - b, se):
        fam.add(f"shift {s}", d, d - Z90 * e, d + Z90 * e)
    return fam.correct()


def test_mle_of_the_simulation_is_mle_ir_exponent():
    rng = np.random.default_rng(3)
    b, se = _betas(np.random.default_rng(3), [-0.2], 1500)
    ref = mle_ir_exponent(power_law_rates(rng, 1500, -0.2, WINDOW[1]), WINDOW)
    assert (b[0], se[0]) == pytest.approx((ref.beta, ref.se), rel=1e-12)


def test_forty_identical_comparisons_hold_the_family_wise_error():
    rng = np.random.default_rng(42)
    any_corrected, any_raw = [], []
    for _ in range(200):
        fam = _family(rng, [0.0] * 40)
        any_corrected.append(any(t.verdict(0.9) == "differ" for t in fam.tests))
        any_raw.append(any(t.p_raw < 0.1 for t in fam.tests))
    fwer = np.mean(any_corrected)
    # nominal 10 %; 200 repetitions have a Monte-Carlo sd of 2.1 points
    assert fwer <= 0.10 + 2 * np.sqrt(0.1 * 0.9 / 200), fwer
    assert np.mean(any_raw) > 0.9          # uncorrected, 40 tests at 90 % almost always "differ"


def test_corrected_verdicts_keep_their_power_on_a_known_difference():
    rng = np.random.default_rng(7)
    found, false = [], []
    for _ in range(20):
        fam = _family(rng, [0.15] * 10 + [0.0] * 30)
        v = [t.verdict(0.9) == "differ" for t in fam.tests]
        found.append(np.mean(v[:10]))
        false.append(any(v[10:]))
    assert np.mean(found) >= 0.9, np.mean(found)
    assert np.mean(false) <= 0.25


def test_primary_is_a_typed_field_with_a_one_line_error():
    with pytest.raises(SettingsError, match=r"^analysis\.primary: 'ols:all' is not one of .* — e\.g\."):
        Settings(primary="ols:all")
    s = Settings()
    assert s.primary_for(True).name == "cumulative:all-stable"          # the paper's setting
    assert s.primary_for(False).name == "mle:symmetry-removed"
    assert Settings(primary="cumulative:symmetry-removed").primary_for(True).field == "beta"


@pytest.fixture(scope="module")
def store_with_nulls(tmp_path_factory):
    """A model of β −0.2 with two nulls of β −0.5, and a second model whose two nulls share its β."""
    kw = dict(rows=1, nseq=4, lmax=32, d=48, n_ir=24)
    a = synthetic_model("a", "attention", -0.2, **kw)
    b = synthetic_model("b", "attention", -0.2, seed=9, **kw)
    kw.pop("rows")
    nulls = null_models(a, -0.5, n=2, **kw) + null_models(b, -0.2, n=2, kind="shuffled", seed=300, **kw)
    return write_store(tmp_path_factory.mktemp("nulls") / "s.zarr", [a, b, *nulls])


def test_a_shifted_null_is_told_apart_and_an_equal_one_is_not(store_with_nulls):
    s = Settings(n_boot=100)
    st = open_store(store_with_nulls, "a")
    assert st.nulls == ["a.random_init.0", "a.random_init.1"] and st.variant is None
    primary = s.primary_for(False)
    far = null_study(st, 0, 32, s, primary).comparisons[0]
    same = null_study(st.model("b"), 0, 32, s, primary).comparisons[0]
    assert far.observable == "β (mle:symmetry-removed)" and far.rank == 2 and far.z > 3
    assert far.lo > 0 and far.verdict.startswith("distinguishable"), far.to_dict()
    assert same.lo < 0 < same.hi and same.verdict.startswith("no difference from its"), same.to_dict()
    # the interval carries both sides: wider than the trained value's own
    assert far.hi - far.lo > far.trained.hi - far.trained.lo


def test_every_observable_the_store_holds_is_read_and_absent_ones_are_skipped(tmp_path):
    """‖J_tt‖_F² written (log-normal, trained e^2 against nulls e^1 in the median); the
    non-normality never written (NaN): skipped without a word."""
    import dataclasses
    rng = np.random.default_rng(0)
    kw = dict(nseq=2, lmax=32, d=24, n_ir=12)
    a = synthetic_model("a", "attention", -0.2, rows=1, **kw)
    a = dataclasses.replace(a, frobenius2=np.exp(rng.normal(2.0, 0.3, (1, 2, 32))))
    nulls = [dataclasses.replace(n, frobenius2=np.exp(rng.normal(1.0, 0.3, (1, 2, 32))))
             for n in null_models(a, -0.2, n=3, **kw)]
    st = open_store(write_store(tmp_path / "s.zarr", [a, *nulls]), "a")
    s = Settings(n_boot=50)
    got = {c.observable: c for c in null_study(st, 0, 32, s, s.primary_for(False)).comparisons}
    density = "window mode density (symmetry-removed modes per token in the window)"
    assert set(got) == {"β (mle:symmetry-removed)", "log ‖J_tt‖_F² (token mean of the log)", density}
    # the density's oracle: the stored rates counted in the window by hand, token by token
    with np.errstate(divide="ignore"):
        lam = np.concatenate([-np.log(np.abs(st.eigenvalues(0, q))) for q in range(2)])   # (64, d)
    lo, hi = s.window
    by_hand = ((lam >= lo) & (lam <= hi)).sum(1).mean()
    assert got[density].trained.value == pytest.approx(by_hand, rel=1e-9)
    assert got[density].trained.lo < by_hand < got[density].trained.hi
    f = got["log ‖J_tt‖_F² (token mean of the log)"]
    assert f.trained.value == pytest.approx(2.0, abs=0.15) and f.delta == pytest.approx(1.0, abs=0.2)
    assert f.lo > 0 and f.rank == 3 and f.trained.unit == "jackknife over 2 sequences, t(1)"
    # 2 × 32 tokens of 12 IR modes: β's modes fall short of its minimum, and it says so
    beta = got["β (mle:symmetry-removed)"]
    assert beta.verdict == beta.check.text and beta.verdict.startswith("not enough data (n = ")
    assert beta.verdict.endswith("stable modes in the window, needs 500)") and np.isnan(beta.p_raw)


def test_analyze_reads_nulls_under_their_model(tmp_path):
    kw = dict(nseq=2, lmax=32, d=32, n_ir=16)            # β from ≥ 500 modes (its minimum)
    a = synthetic_model("a", "attention", -0.2, rows=1, **kw)
    path = write_store(tmp_path / "s.zarr", [a, *null_models(a, -0.5, n=2, **kw)])
    r = analyze(path, tmp_path, Settings(n_boot=20, lengths=(32,)), progress=False)["a"]
    doc = json.loads((tmp_path / "fits.json").read_text())
    assert set(doc["models"]) == {"a"}                                   # nulls are not models
    fam = doc["family"]
    # β and the window mode density, each against the one null kind
    assert fam["correction"] == "Holm step-down" and fam["m"] == len(fam["tests"]) == 2
    assert all(t["p_adjusted"] >= t["p_raw"] for t in fam["tests"])
    c = doc["models"]["a"]["nulls"]["comparisons"][0]
    assert c["delta"] > 0.15 and c["p_adjusted"] >= c["p_raw"] and c["rank"] == 2
    md = (tmp_path / "report.md").read_text()
    assert "## a.random_init.0" not in md and "Family of tests" in md and "p Holm" in md
    assert "primary β: in-window maximum-likelihood fit, symmetry-removed modes" in md
    assert (tmp_path / "tdos_vs_nulls.png").exists()
    assert "window slope" not in headline_lines(r)[2]
    # the power law rejected (the analysis is immutable: a copy whose headline has GOF p 0)
    r = dataclasses.replace(r, results={**r.results, "headline": dataclasses.replace(
        r.headline, gof_p=0.0)})
    lines = headline_lines(r)
    assert "β: a window slope, not an exponent (power law rejected, p = 0)" in lines[2]
    ir = doc["models"]["a"]["primary"]["headline"]["infrared"]
    assert ir["window"] == [1e-4, 5e-3] and np.isfinite(ir["beta"]) and np.isfinite(ir["gof_p"])
    assert any("**window-slope test**" in x and "infrared sub-window [0.0001, 0.005]" in x
               for x in lines)
    dens = doc["models"]["a"]["primary"]["headline"]["window_mode_density"]
    assert dens["value"] == r.row().by_mode[r.primary.modes].density > 0


def test_compare_carries_the_nulls_and_counts_its_family(store_with_nulls):
    from analysis.studies.compare import compare_models
    c = compare_models([str(store_with_nulls)], Settings(n_boot=20, lengths=(32,)))
    assert [s.name for s in c.sides] == ["a", "b"]                       # nulls are not compared as models
    assert set(c.nulls) == {"a", "b"} and len(c.primary_deltas) == 1
    d = c.primary_deltas[0]
    # Δβ, Δ window mode density, and every observable against its nulls
    assert d.p_adjusted >= d.p_raw and c.family.m == 2 + sum(len(n.comparisons) for n in c.nulls.values())
    (dd,) = c.density_deltas
    counts = []
    for name in ("a", "b"):                              # the oracle: modes in the window by hand
        st = open_store(store_with_nulls, name)
        with np.errstate(divide="ignore"):
            lam = np.concatenate([-np.log(np.abs(st.eigenvalues(0, q)[:32])) for q in range(4)])
        counts.append(((lam >= 1e-4) & (lam <= 5e-2)).sum(1).mean())
    assert dd.delta == pytest.approx(counts[0] - counts[1], rel=1e-9)
    # both models on the same 4 sequences: a paired jackknife, t(3), and its p says so
    assert dd.law["method"] == "t" and dd.law["dof"] == 3 and dd.p_method == "t(3)"
    assert dd.lo < dd.delta < dd.hi and np.isfinite(dd.p_adjusted)
    doc = c.to_dict()
    assert doc["family"]["tests"][0]["p_raw"] == d.p_raw and "pairs" in doc


def test_analyze_makes_each_null_study_once_and_the_comparison_reads_it(store_with_nulls, tmp_path):
    """`tdos analyze` of two models: the comparison's null studies are the ones of each
    model's own section (the same numbers, the same Holm family), not a second reading."""
    from analysis.studies.compare import compare_models
    s = Settings(n_boot=20, lengths=(32,))
    results = analyze(store_with_nulls, tmp_path, s, progress=False)
    doc = json.loads((tmp_path / "fits.json").read_text())
    for name in ("a", "b"):
        assert doc["comparison"]["nulls"][name] == doc["models"][name]["nulls"]
        assert all(np.isfinite(c["p_adjusted"]) for c in doc["models"][name]["nulls"]["comparisons"])
    assert doc["comparison"]["family"] == doc["family"]          # one family, counted once
    assert doc["family"]["label"] == "tdos analyze of 2 models"
    given = {n: r.nulls for n, r in results.items()}
    c = compare_models([f"{store_with_nulls}:a", f"{store_with_nulls}:b"], s, given)
    # taken, not made again: the comparison counts the given studies in its own family (an
    # immutable study is counted by a copy), so every measured value is the very one given
    assert all(x.trained is y.trained and x.nulls is y.nulls for n in given
               for x, y in zip(c.nulls[n].comparisons, given[n].comparisons, strict=True))
