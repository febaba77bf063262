"""Issue 50: p from the interval's own distribution, and nulls compared one kind at a time on
the trained model's own tokens. Synthetic cases whose answer is known: intervals built here
by their definition, stores written through the real writer (synthetic_store)."""
import dataclasses
import json

import numpy as np
import pytest
from scipy import stats

from analysis.fit.multiplicity import (Family, format_p, p_from_interval, p_from_replicates,
                                       p_from_t, quantile)
from analysis.io.store import open_store
from analysis.report.analyze import analyze
from analysis.studies.estimates import primary_beta
from analysis.studies.nulls import FirstSequences, null_study, rank_p
from sweep.format.settings import Settings
from synthetic_store import null_models, synthetic_model, write_store

DOFS = (1, 2, 3, 5, 10, 30, np.inf)


@pytest.mark.parametrize("level", [0.8, 0.9, 0.95])
def test_a_t_interval_and_its_p_agree_for_every_dof(level):
    """d ± t_{ν,q} se excludes 0 exactly when p < 1 − level; at the interval's edge
    (|d| = t_{ν,q} se) p is 1 − level itself."""
    rng = np.random.default_rng(0)
    for nu in DOFS:
        q = stats.t.ppf((1 + level) / 2, nu) if np.isfinite(nu) else stats.norm.ppf((1 + level) / 2)
        assert quantile(level, nu) == pytest.approx(q)
        for d, se in zip(rng.normal(0, 3, 200), rng.uniform(0.2, 2, 200)):
            lo, hi = d - q * se, d + q * se
            p = p_from_interval(d, lo, hi, level, nu)
            assert p == pytest.approx(p_from_t(d, se, nu), rel=1e-9)
            assert (p < 1 - level) == (not lo <= 0 <= hi), (nu, d, se, p)
        assert p_from_t(q * 0.7, 0.7, nu) == pytest.approx(1 - level, rel=1e-9)


def test_the_normal_p_of_a_t3_interval_claims_far_too_much():
    """The issue's case: an interval made with t₃ read back with the normal quantile. At
    |d| = 2 × its t₃ 90 % half-width the t₃ p is 0.018, while the normal reading says 0.001."""
    se = 1.0
    d = 2 * stats.t.ppf(0.95, 3) * se
    right = p_from_t(d, se, 3)
    wrong = p_from_interval(d, d - stats.t.ppf(0.95, 3), d + stats.t.ppf(0.95, 3), 0.9)   # normal
    assert right == pytest.approx(2 * stats.t.sf(d, 3)) and 0.01 < right < 0.03
    assert 0.0009 < wrong < 0.0011 and wrong < right / 15


def test_a_bootstrap_p_counts_its_replicates_and_never_falls_below_its_floor():
    rng = np.random.default_rng(1)
    B = 499
    for far in (0, 1, 7, 60, 250):
        reps = np.concatenate([rng.uniform(0.1, 1, B - far), -rng.uniform(0, 1, far)])
        p = p_from_replicates(0.5, rng.permutation(reps))
        assert p == pytest.approx(min(1, 2 * (1 + far) / (1 + B)))     # the count, by hand
        assert p >= 1 / (1 + B)
        assert p_from_replicates(-0.5, -reps) == p                       # either sign
    floor = p_from_replicates(0.5, np.ones(B))
    assert floor == 2 / (1 + B)
    assert format_p(floor, f"bootstrap B={B} (sequences)") == f"≤ {2 / (1 + B):.2g}"
    assert format_p(1e-9, "t(3)") == "< 0.0001" and format_p(0.0123, "t(3)") == "0.012"


def test_a_family_records_the_method_of_every_p():
    f = Family("methods", {"tests": 3}, 0.9)
    f.add("t", 1.0, 1.0 - quantile(0.9, 3) * 0.4, 1.0 + quantile(0.9, 3) * 0.4, dof=3)
    f.add("normal", 1.0, 0.5, 1.5)
    f.add("boot", 0.5, 0.1, 0.9, replicates=np.full(99, 0.5), unit="sequences")
    doc = f.correct().to_dict()
    assert [t["p_method"] for t in doc["tests"]] == ["t(3)", "normal", "bootstrap B=99 (sequences)"]
    assert doc["tests"][0]["p_raw"] == pytest.approx(2 * stats.t.sf(2.5, 3))
    assert doc["tests"][2]["p_raw"] == 2 / 100
    table = "\n".join(f.table())
    # the bootstrap's raw p at its floor 2/(1 + B) says so; Holm's 2 × 0.02 is a plain number
    assert "| p from |" in table and "| t(3) |" in table and "| ≤ 0.02 | 0.04 |" in table


KW = dict(lmax=32, d=48, n_ir=24)


@pytest.fixture(scope="module")
def two_kinds(tmp_path_factory):
    """Trained β −0.2 with two random_init nulls of β −0.5 and two shuffled nulls of β −0.2."""
    a = synthetic_model("a", "attention", -0.2, rows=1, nseq=2, **KW)
    nulls = (null_models(a, -0.5, n=2, nseq=2, **KW)
             + null_models(a, -0.2, n=2, kind="shuffled", seed=300, nseq=2, **KW))
    return write_store(tmp_path_factory.mktemp("kinds") / "s.zarr", [a, *nulls])


def test_two_null_kinds_that_differ_are_two_comparisons_never_pooled(two_kinds):
    s = Settings(n_boot=100)
    study = null_study(open_store(two_kinds, "a"), 0, 32, s, s.primary_for(False))
    beta = {c.kind: c for c in study.comparisons if c.observable.startswith("β")}
    assert set(beta) == {"random_init", "shuffled"}
    assert all(len(c.nulls) == 2 and all(n.startswith(f"a.{k}.") for n in c.nulls)
               for k, c in beta.items())
    assert beta["random_init"].delta == pytest.approx(0.3, abs=0.1)
    assert abs(beta["shuffled"].delta) < 0.1 and beta["shuffled"].lo < 0 < beta["shuffled"].hi
    # two nulls of a kind: t with 1 degree of freedom, and a rank test that cannot reach 0.1
    assert beta["random_init"].p_method == "t(1)" and rank_p(2, 2) == 2 / 3
    fam = Family("kinds", {}, 0.9)
    names = [t.name for t in study.add_to(fam)]
    assert sum(n.endswith("β (mle:symmetry-removed)") for n in names) == 2
    assert any("random_init nulls (2 seq, t < 32)" in n for n in names)
    assert any("shuffled nulls (2 seq, t < 32)" in n for n in names)


def _mixed(name, seed):
    """Three sequences: sequence 0 of β −0.6, sequences 1 and 2 of β −0.1."""
    first = synthetic_model(name, "attention", -0.6, rows=1, nseq=1, seed=seed, **KW)
    rest = synthetic_model(name, "attention", -0.1, rows=1, nseq=2, seed=seed + 1, **KW)
    return dataclasses.replace(first, eigenvalues=np.concatenate([first.eigenvalues,
                                                                  rest.eigenvalues], 1))


def test_the_trained_value_is_read_on_the_nulls_sequences_only(tmp_path):
    """Nulls on sequence 0 only, of sequence 0's β and ‖J_tt‖_F²: on those tokens trained and
    nulls agree; over all three sequences the trained β would differ from them by ~+0.3 and
    log ‖J_tt‖_F² by ~+1.3."""
    rng = np.random.default_rng(5)
    fro = np.exp(rng.normal([[[1.0], [3.0], [3.0]]], 0.1, (1, 3, 32)))      # seq 0: e^1, others e^3
    a = dataclasses.replace(_mixed("a", 0), frobenius2=fro)
    nulls = [dataclasses.replace(n, frobenius2=np.exp(rng.normal(1.0, 0.1, (1, 1, 32))))
             for n in null_models(a, -0.6, n=3, nseq=1, **KW)]
    st = open_store(write_store(tmp_path / "s.zarr", [a, *nulls]), "a")
    s = Settings(n_boot=100)
    primary = s.primary_for(False)
    study = null_study(st, 0, 32, s, primary)
    c = next(c for c in study.comparisons if c.observable.startswith("β"))
    alone = primary_beta(FirstSequences(st, 1), 0, 32, s, primary)
    everything = primary_beta(st, 0, 32, s, primary)
    assert c.sequences == 1 and c.trained.value == alone.value
    assert c.trained.value == pytest.approx(-0.6, abs=0.1)
    assert everything.value > c.trained.value + 0.2                     # sequence 0 is atypical
    assert abs(c.delta) < 0.1 and c.lo < 0 < c.hi, c.to_dict()
    f = next(c for c in study.comparisons if c.observable.startswith("log"))
    assert f.trained.value == pytest.approx(1.0, abs=0.05) and abs(f.delta) < 0.1, f.to_dict()


def test_analyze_records_each_kind_and_its_p_method(two_kinds, tmp_path):
    analyze(two_kinds, tmp_path, Settings(n_boot=30, lengths=(32,)), progress=False)
    doc = json.loads((tmp_path / "fits.json").read_text())
    tests = doc["family"]["tests"]
    # β and the window mode density, each against each of the two kinds
    assert len(tests) == 4 and all(t["p_method"] == "t(1)" for t in tests)
    nulls = doc["models"]["a"]["nulls"]
    assert set(nulls["kinds"]) == {"random_init", "shuffled"}
    assert all(v["sequences"] == 2 and v["same_tokens"] for v in nulls["kinds"].values())
    assert "rank test cannot go below p = 2/(k + 1) = 0.67" in nulls["designs"]["shuffled"]
    md = (tmp_path / "report.md").read_text()
    assert "one kind at a time" in md and "What each design can show" in md
    assert "| β (mle:symmetry-removed) | shuffled | 2 seq, t < 32 |" in md
