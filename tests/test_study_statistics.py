"""The declared tests' statistics (analysis/studies/against.py, study.py) on data of known
truth: the paired reading keeps its level and gains the power a shared sequence effect takes
from the unpaired one; the rank test never goes below 2/(k + 1) and rejects at its level; a
store with 8 nulls of a kind is read paired and one with 19 gets a rank test; a β difference
that lives only above λ = 1.25e-2 is window-dependent, while one across the whole window
differs (synthetic spectra of known law, written through the real writer)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import zarr
from sweep.format.variants import Variant
from synthetic_store import SyntheticModel, null_models, synthetic_model, write_store

from analysis.fit.enough import enough
from analysis.fit.multiplicity import quantile
from analysis.studies.against import null_test
from analysis.studies.declarable import Measured
from analysis.studies.nulls import NullComparison
from analysis.studies.study import declared_study
from sweep.format.study import STUDY, Study

LEVEL = 0.9


def _measured(per_seq) -> Measured:
    """A token-mean-like value from per-sequence values (S,), its jackknife interval."""
    x = np.asarray(per_seq, np.float64)
    S = len(x)
    jack = (x.sum() - x) / (S - 1)
    se = np.sqrt((S - 1) / S * ((jack - jack.mean()) ** 2).sum())
    h = quantile(LEVEL, S - 1) * se
    return Measured(float(x.mean()), float(x.mean() - h), float(x.mean() + h), "jackknife",
                    float(S - 1), enough("token_mean", 100), "", tuple(jack))


def _draw(rng, k, delta, S=6, seq_sd=1.0, noise=0.05, seed_sd=0.02):
    """Trained and k nulls on S shared sequences: each sequence's own effect is shared."""
    a = rng.normal(0, seq_sd, S)
    def model(mu):
        return _measured(mu + rng.normal(0, seed_sd) + a + rng.normal(0, noise, S))
    return model(delta), {f"n{j}": model(0.0) for j in range(k)}


def _rate(k, delta, paired, n=300, seed=1):
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(n):
        trained, nulls = _draw(rng, k, delta)
        if paired:
            t = null_test(trained, nulls, LEVEL)
            assert t.paired and "paired over 6 sequences" in t.p_method
            p = t.p
        else:
            p = NullComparison("", "", trained, nulls, LEVEL).p_raw
        hits += p < 1 - LEVEL
    return hits / n


def test_paired_reading_keeps_its_level_and_gains_power():
    assert 0.04 <= _rate(8, 0.0, paired=True) <= 0.16                 # nominal 0.10
    assert _rate(8, 0.15, paired=True) > 0.8
    assert _rate(8, 0.15, paired=False) < 0.3                          # the sequence effect in se_t


def test_fewer_than_eight_nulls_are_read_unpaired():
    trained, nulls = _draw(np.random.default_rng(0), 7, 0.0)
    t = null_test(trained, nulls, LEVEL)
    assert not t.paired and t.p_method == "t(6)" and t.p_rank is None
    c = NullComparison("", "", trained, nulls, LEVEL)
    assert (t.delta, t.lo, t.hi, t.p) == (c.delta, c.lo, c.hi, c.p_raw)


def test_the_rank_test_never_goes_below_two_over_k_plus_one_and_rejects_at_its_level():
    rng = np.random.default_rng(2)
    ps = []
    for _ in range(400):
        trained, nulls = _draw(rng, 19, 0.0)
        ps.append(null_test(trained, nulls, LEVEL).p_rank)
    ps = np.array(ps)
    assert ps.min() >= 2 / 20 - 1e-12
    assert 0.05 <= (ps <= 0.1 + 1e-12).mean() <= 0.16                 # rank 0 or 19: 2/20
    trained, nulls = _draw(rng, 19, 5.0)
    t = null_test(trained, nulls, LEVEL)
    assert t.rank == 19 and t.p_rank == pytest.approx(0.1)


def test_one_null_is_not_enough_for_a_t_interval():
    trained, nulls = _draw(np.random.default_rng(3), 1, 0.0)
    t = null_test(trained, dict(list(nulls.items())[:1]), LEVEL)
    assert not t.check.ok and np.isnan(t.p)
    assert t.check.text == "not enough data (n = 1 nulls of the kind, needs 2)"


# ------------------------------------------------------------------ stores of known law
KW = dict(nseq=4, lmax=16, d=24, n_ir=16)


def _declare(path, study):
    zarr.open_group(str(path), mode="r+").attrs[STUDY] = study.record("2026-12-01T00:00:00+00:00", False)


@pytest.mark.parametrize("k", [8, 19])
def test_a_store_with_many_nulls_is_paired_and_ranked(tmp_path, k):
    a = synthetic_model("a", "attention", -0.2, rows=1, **KW)
    path = write_store(tmp_path / "s.zarr", [a, *null_models(a, -0.2, n=k, **KW)])
    _declare(path, Study(layers=(0,), observables=("beta", "density"), against=("random_init",),
                         level=LEVEL))
    rows = declared_study(path).rows
    density = rows[1]
    assert density.observable == "density" and density.test.k == k
    assert density.test.paired and "paired over 4 sequences" in density.test.p_method
    assert (density.test.p_rank is not None) == (k >= 19)
    if k >= 19:
        assert density.test.p_rank >= 2 / (k + 1)


# A spectrum whose nulls carry extra modes only in [1.25e-2, 0.1]: at the declared window
# [1e-4, 5e-2] they lift β; at [1e-4, 1.25e-2] (the upper edge × 1/4) the two laws are equal.
N_IR, N_TOP, D = 60, 16, 96


def _spectrum(rng, extra, lmax=16, nseq=4, beta=-0.2, top=(1.25e-2, 0.1)):
    def token():
        lam = 0.1 * rng.random(N_IR) ** (1 / (1 + beta))                       # ρ ∝ λ^β on (0, 0.1]
        hi = (np.exp(rng.uniform(*np.log(top), N_TOP)) if extra
              else np.exp(rng.normal(0.5, 0.5, N_TOP)).clip(0.2))              # above the window
        uv = np.exp(rng.normal(0.5, 0.5, D - N_IR - N_TOP)).clip(0.2)
        lam = np.concatenate([lam, hi, uv])
        return np.exp(-lam + 1j * rng.normal(0, 0.2, D))
    ev = np.array([[[token() for _ in range(lmax)] for _ in range(nseq)]], np.complex64)
    return ev                                                                 # (1, S, L, d)


def _model(name, ev, variant=None):
    return SyntheticModel(name=name, eigenvalues=ev, layers=[0], arch="attention", variant=variant)


@pytest.mark.parametrize("top, code", [((1.25e-2, 0.1), "window-dependent"),
                                       ((1e-4, 0.1), "differs")])
def test_a_beta_difference_at_the_declared_window_alone_is_window_dependent(tmp_path, top, code):
    rng = np.random.default_rng(7)
    models = [_model("a", _spectrum(rng, extra=False))]
    models += [_model(f"a.random_init.{j}", _spectrum(rng, extra=True, top=top),
                      Variant("random_init", j, "a")) for j in range(4)]
    path = write_store(tmp_path / "w.zarr", models)
    _declare(path, Study(layers=(0,), observables=("beta", "density"),
                         against={"beta": ["random_init"], "density": []}, level=LEVEL))
    (row,) = declared_study(path).rows
    assert row.observable == "beta" and row.test.check.ok
    assert row.test.p < 1 - LEVEL                         # the declared window alone differs
    assert len(row.windows) == 8 and all(w.trained.check.ok for w in row.windows)
    assert row.code == code, [(w.edge, w.factor, w.test.p) for w in row.windows]
    narrow = next(w for w in row.windows if (w.edge, w.factor) == ("hi", 0.25))
    assert (narrow.test.p > 1 - LEVEL) == (code == "window-dependent")
    tests = [row.test, *(w.test for w in row.windows)]
    one_sign = len({np.sign(t.delta) for t in tests}) == 1
    d = row.to_dict()                                     # the largest p, or 1 where Δ flips sign
    assert len(d["windows"]) == 8
    assert d["p_family"] == pytest.approx(max(t.p for t in tests) if one_sign else 1.0)
    assert dataclasses.asdict(row.trained.check)["needs"] == 500


def test_the_quantization_spread_rides_on_the_nulls_tokens(tmp_path):
    """Members (group attribute `variant`, role ensemble) on 1 of the model's 4 sequences, nulls on all:
    each declared row carries the members' values on the tokens they share with the nulls,
    their sd and its χ² upper bound against the row's Δ."""
    a = synthetic_model("a", "attention", -0.2, rows=1, **KW)
    members = [dataclasses.replace(synthetic_model(f"a.quantized.{k}", "attention", -0.2, rows=1,
                                                   seed=500 + k, **{**KW, "nseq": 1}),
                                   variant=Variant("quantized", k, "a", "ensemble")) for k in range(3)]
    path = write_store(tmp_path / "q.zarr", [a, *null_models(a, -0.7, n=2, **KW), *members])
    _declare(path, Study(layers=(0,), observables=("beta", "density"), against=("random_init",),
                         level=LEVEL))
    density = declared_study(path).rows[1]
    q = density.quantization
    assert q is not None and set(q.members) == {"a.quantized.0", "a.quantized.1", "a.quantized.2"}
    assert q.sequences == 1 and density.tokens.seqs == 4
    assert q.sd_upper > q.sd > 0 and q.of_delta == pytest.approx(q.sd_upper / abs(density.test.delta))
    assert density.to_dict()["quantization"]["bound"].startswith("upper end of the two-sided")
