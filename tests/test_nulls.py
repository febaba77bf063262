"""Issue 42, analysis half: each observable against its nulls, the primary estimator, and
verdicts counted in a family (Holm). Nulls are written through the real writer
(synthetic_store.null_models): groups carrying the attribute null = {of, kind, seed}."""
import json

import numpy as np
import pytest
from scipy import stats

from analysis.fit.fits import mle_ir_exponent
from analysis.fit.multiplicity import Family, holm, interval_p
from analysis.fit.resampling import verdict
from analysis.io.settings import Settings, SettingsError
from analysis.io.store import open_store
from analysis.report.analyze import analyze
from analysis.studies.nulls import null_study
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
        assert t.verdict(0.9) == verdict(lo, hi, 0.9), (d, lo, hi)


def _beta(rng, beta, n):
    """The in-window MLE of n i.i.d. power-law rates and its Fisher 90 % interval."""
    f = mle_ir_exponent(power_law_rates(rng, n, beta, 0.05), WINDOW)
    return f.beta, f.se


def _family(rng, shifts, n=1500):
    """40 comparisons of two models of β −0.2 and −0.2 + shift each, Holm-corrected."""
    fam = Family("simulation", {"comparisons": len(shifts)}, 0.9)
    for s in shifts:
        (a, sa), (b, sb) = _beta(rng, -0.2 + s, n), _beta(rng, -0.2, n)
        se = np.hypot(sa, sb)
        fam.add(f"shift {s}", a - b, a - b - Z90 * se, a - b + Z90 * se)
    return fam.correct()


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
    kw = dict(rows=1, nseq=2, lmax=32, d=48, n_ir=24)
    a = synthetic_model("a", "attention", -0.2, **kw)
    b = synthetic_model("b", "attention", -0.2, seed=9, **kw)
    kw.pop("rows")
    nulls = null_models(a, -0.5, n=2, **kw) + null_models(b, -0.2, n=2, kind="shuffled", seed=300, **kw)
    return write_store(tmp_path_factory.mktemp("nulls") / "s.zarr", [a, b, *nulls])


def test_a_shifted_null_is_told_apart_and_an_equal_one_is_not(store_with_nulls):
    s = Settings(n_boot=100)
    st = open_store(store_with_nulls, "a")
    assert st.nulls == ["a.random_init.0", "a.random_init.1"] and st.null is None
    primary = s.primary_for(False)
    far = null_study(st, 0, 32, s, primary).comparisons[0]
    same = null_study(st.model("b"), 0, 32, s, primary).comparisons[0]
    assert far.observable == "β (mle:symmetry-removed)" and far.rank == 2 and far.z > 3
    assert far.lo > 0 and far.verdict.startswith("distinguishable"), far.to_dict()
    assert same.lo < 0 < same.hi and same.verdict.startswith("not distinguishable"), same.to_dict()
    # the interval carries both sides: wider than the trained value's own
    assert far.hi - far.lo > far.trained.hi - far.trained.lo


def test_analyze_reads_nulls_under_their_model(store_with_nulls, tmp_path):
    analyze(store_with_nulls, tmp_path, Settings(n_boot=50, lengths=(32,)), progress=False)
    doc = json.loads((tmp_path / "fits.json").read_text())
    assert set(doc["models"]) == {"a", "b"}                              # nulls are not models
    fam = doc["family"]
    assert fam["correction"] == "Holm step-down" and fam["m"] == len(fam["tests"]) >= 3
    assert all(t["p_adjusted"] >= t["p_raw"] for t in fam["tests"])
    c = doc["models"]["a"]["nulls"]["comparisons"][0]
    assert c["delta"] > 0.15 and c["p_adjusted"] >= c["p_raw"] and c["rank"] == 2
    md = (tmp_path / "report.md").read_text()
    assert "## a.random_init.0" not in md and "Family of tests" in md and "p Holm" in md
    assert "primary β: in-window maximum-likelihood fit, symmetry-removed modes" in md
    assert (tmp_path / "a" / "tdos_vs_nulls.png").exists()
