"""One time story (issue 57 item 4): the README, docs/performance.md, benchmarks/results/time.md
and real.md, and the dry run's own calibration (sweep/budget/measured.py) say what the one
record benchmarks/results/time.json says, rendered by benchmarks/time_docs.py; today's dry run
of the recorded configs gives the recorded estimate; and the estimate is within 30 % of the
measured wall of every recorded run."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from sweep.budget import size_sweep
from sweep.budget.time import task_count
from sweep.config.load import load_config
from sweep.plan.make import make_plan

REPO = Path(__file__).resolve().parents[1]
RECORD = json.loads((REPO / "benchmarks" / "results" / "time.json").read_text())


def _time_docs():
    spec = importlib.util.spec_from_file_location("time_docs", REPO / "benchmarks" / "time_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_quoted_time_is_the_records():
    for path, text in _time_docs().render(RECORD).items():
        assert path.read_text() == text, f"{path.relative_to(REPO)}: run benchmarks/time_docs.py"


def test_the_estimate_is_within_30_percent_of_every_measured_run():
    docs = _time_docs()
    assert {"quickstart", "demo", "real"} <= set(RECORD["runs"])
    for name, run in docs.summary(RECORD).items():
        assert 0.7 <= run["estimate_s"] / run["sweep_s"] <= 1.3, name


@pytest.mark.parametrize("name", ["quickstart", "demo"])
def test_todays_dry_run_of_a_recorded_sweep_gives_the_recorded_estimate(name, tmp_path):
    """The recorded terms and task counts are today's model's: a change to the time model
    without a new record fails here (the shipped checkpoints only; make real's need the GGUF)."""
    docs = _time_docs()
    for step in (s for s in RECORD["runs"][name]["steps"] if "estimate" in s):
        config = step["argv"][2]
        plan = make_plan(load_config(REPO / config, {"store": str(tmp_path / "x.zarr")}))
        budget = size_sweep(plan, workers=step["estimate"]["workers"])
        assert budget.wall_seconds == pytest.approx(docs.reestimate(step, RECORD["fit"]), rel=1e-9)
        assert sum(task_count(m, plan.config, min(plan.config.inputs.sequences, m.tokens.shape[0]))
                   for m in plan.models) == step["estimate"]["tasks"]
