"""The dry run's power lines (sweep/budget/power.py, docs/power.md): the variances it reads are
what the committed SmolLM2 comparisons give, the detectable |Δ| is what the analysis' own t test
detects with 80 % power (a simulation), every declared test gets its line, and a split of the
same null cost is proposed exactly when the seeds' spread makes more seeds worth it."""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import importlib.util
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from sweep.budget import power
from sweep.config.load import config_from_dict
from sweep.format.study import Study
from sweep.plan.make import make_plan

REPO = Path(__file__).resolve().parents[1]


def with_study(cfg, study):
    """cfg with `study` (SweepConfig.study once the config section lands; until then set on a copy)."""
    if any(f.name == "study" for f in dataclasses.fields(cfg)):
        return dataclasses.replace(cfg, study=study)
    out = copy.copy(cfg)
    object.__setattr__(out, "study", study)
    return out


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    """The shipped 4-layer Mamba with 3 random_init and 2 shuffled nulls, declared study."""
    doc = {"model": {"path": str(REPO / "checkpoints" / "tiny-mamba-bytes"), "name": "m",
                     "nulls": {"random_init": 3, "shuffled": 2, "sequences": 2}},
           "inputs": {"sequences": 3, "length": 256, "seed": 0}, "layers": [1, 3],
           "store": str(tmp_path_factory.mktemp("power") / "p.zarr")}
    cfg = with_study(config_from_dict(doc), Study(layers=(1, 3), observables=("beta", "density", "tail_width"),
                                                  against=("random_init", "shuffled", "gaussian"), level=0.95))
    return make_plan(cfg)


def test_variances_are_what_the_committed_comparisons_give():
    spec = importlib.util.spec_from_file_location("pv", REPO / "benchmarks" / "power_variances.py")
    pv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pv)
    committed = json.loads(power.VARIANCES.read_text())
    for path, sha in committed["sources"].items():
        assert hashlib.sha256((REPO / path).read_bytes()).hexdigest() == sha, (
            f"{path} changed since sweep/budget/variances.json was made: run benchmarks/power_variances.py")
    assert pv.build() == committed
    kinds = {(r["observable"], r["layer"]) for r in committed["rows"]}
    assert {("beta", 7), ("beta", 15), ("beta", 22), ("density", 15), ("log_frobenius", 15),
            ("nonnormality", 15), ("alignment", 15)} <= kinds


def test_detectable_delta_is_detected_with_80_percent_power_by_the_analysis_test():
    """Draw the trained value and k nulls from the variance model, test Δ / se_Δ against
    t(k − 1) at α / m as analysis/studies/nulls.py does (se_Δ from the nulls' own spread):
    at the detectable |Δ| about 80 % of the draws reject."""
    v = {"v_trained": 2e-4, "v_null": 3e-4, "v_seed": 1e-4}
    k, S, L, alpha, m = 8, 4, 32, 0.05, 45
    n = S * L / 32
    delta = power.detectable(power.se_delta(v, k, S, L), k, alpha, m)
    gen = np.random.default_rng(0)
    draws = 20000
    trained = delta + gen.normal(0, math.sqrt(v["v_trained"] / n), draws)
    nulls = gen.normal(0, math.sqrt(v["v_seed"] + v["v_null"] / n), (draws, k))
    se = np.sqrt(v["v_trained"] / n + nulls.var(axis=1, ddof=1) * (1 + 1 / k))
    p = 2 * stats.t.sf(np.abs(trained - nulls.mean(axis=1)) / se, k - 1)
    assert 0.75 < np.mean(p < alpha / m) < 0.85
    assert power.detectable(1.0, 1, alpha, m) == math.inf          # one null: no t test


def test_every_declared_test_gets_a_line(plan):
    rows = power.design(plan)
    assert [(t.observable, t.layer, t.kind) for t in rows] == plan.config.study.tests()
    by = {(t.observable, t.layer, t.kind): t for t in rows}
    beta = by["beta", 3, "random_init"]
    assert (beta.k, beta.sequences, beta.tokens) == (3, 2, 256)
    v, _ = power.variances("beta", 3, "random_init", power.variance_rows())
    assert beta.se == pytest.approx(power.se_delta(v, 3, 2, 256))
    measured = {r["layer"] for r in power.variance_rows() if r["observable"] == "beta"}
    nearest = min(measured, key=lambda x: (abs(x - 3), x))          # whatever make real measured
    assert 3 not in measured and f"layer {nearest}'s SmolLM2" in beta.source
    assert math.isnan(by["tail_width", 1, "shuffled"].se)          # never measured: said so
    assert "no variance measured" in by["tail_width", 1, "shuffled"].line()
    assert by["beta", 1, "gaussian"].k == 0 and "no gaussian nulls" in by["beta", 1, "gaussian"].line()


def test_the_dry_run_prints_the_design(plan):
    from sweep.budget import size_sweep

    text = size_sweep(plan, workers=2).table()
    assert "design: 18 declared tests" in text and "Holm" in text
    assert text.count("detectable |Δ| >=") == 8            # beta and density x 2 layers x 2 kinds


def test_more_seeds_pay_more_where_seeds_differ(plan):
    """At 256 tokens a sequence costs more than a seed's fixed costs here: the budget of 3 seeds
    on 2 sequences buys 4 or more on 1 (how many: the time model's measured costs). Where seeds differ (v_seed) that is proposed with a large gain
    (the spread and the t quantile both shrink); where each null's own sampling error dominates,
    halving its tokens costs back part of what the extra seeds' t quantile gives."""
    def rows(v_seed, v_null):
        return [{"observable": o, "layer": 3, "kind": kd, "k": 4, "v_trained": 1e-6,
                 "v_null": v_null, "v_seed": v_seed} for o in ("beta", "density")
                for kd in ("random_init", "shuffled")]

    def gain(lines):
        line = next(x for x in lines if " random_init: " in x)
        k = re.search(r"k = (\d+) nulls on 1 sequence\(s\) instead of k = 3 on 2", line)
        assert k and int(k.group(1)) >= 4, line
        return float(line.split("detectable |Δ| x ")[1].split()[0])

    seeds = gain(power.proposals(plan, 2, rows(v_seed=1e-2, v_null=1e-6)))
    tokens = gain(power.proposals(plan, 2, rows(v_seed=0.0, v_null=1.0)))
    assert seeds < 0.8 * tokens and tokens < 0.95      # 0.36 and 0.50 with the costs of 2026-12-07
