"""The dry run's memory per worker (sweep/budget/memory.py) against what workers hold.

benchmarks/bench_worker_memory.py swept real checkpoints at d = 576 (SmolLM2's GGUF, both
paths), 1024 and 4096 (Llama-3-8B's layer shapes) and recorded each plan's dry-run figure beside
the worker's peak RSS: the figure is within 30 % of every peak, and today's dry run of each
recorded plan gives the recorded figure (a change to the model without a new measurement fails
here). A Llama-3-70B-shaped float64 layer plans within one 24 GiB machine."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sweep.budget import GiB, size_sweep
from sweep.config.load import config_from_dict
from sweep.plan.architecture import ModelInfo
from sweep.plan.layers import LayerKind
from sweep.plan.make import Plan, make_plan

REPO = Path(__file__).resolve().parents[1]
RECORD = json.loads((REPO / "benchmarks" / "results" / "bench_worker_memory.json").read_text())


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    doc = {"model": {"path": str(REPO / "checkpoints" / "tiny-mamba-bytes")},
           "inputs": {"sequences": 1, "length": 8, "seed": 0}, "layers": [0],
           "store": str(tmp_path_factory.mktemp("mem") / "m.zarr")}
    return make_plan(config_from_dict(doc))


def plan_of(base, info: dict, dtype: str, engine: str, rows, length: int, block: int,
            files=(), memory_limit=None) -> Plan:
    """`base`'s plan with one model of these shapes (no checkpoint read)."""
    cfg, m = base.config, base.models[0]
    info = ModelInfo(kinds=(LayerKind("attention"),) * info["n_layers"], **info)
    cfg = dataclasses.replace(cfg, compute=dataclasses.replace(cfg.compute, token_block=block),
                              inputs=dataclasses.replace(cfg.inputs, sequences=1, length=length),
                              cluster=dataclasses.replace(cfg.cluster, memory_limit=memory_limit))
    model = dataclasses.replace(m, info=info, rows=tuple(tuple(r) for r in rows), engine=engine,
                                spec=dataclasses.replace(m.spec, dtype=dtype),
                                checkpoint={"files": {f: {} for f in files}})
    return Plan(cfg, (model,))


@pytest.mark.parametrize("row", RECORD["rows"], ids=lambda r: r["case"])
def test_the_dry_run_is_within_30_percent_of_a_workers_measured_peak(base, row):
    c = row["config"]
    plan = plan_of(base, row["info"], c["model"]["dtype"], row["engine"], row["rows"],
                   c["inputs"]["length"], c["compute"]["token_block"], row["files"])
    budget = size_sweep(plan, workers=1)
    recorded = row["estimate_gib"] * GiB - row["process_bytes"]
    assert budget.worker_bytes - budget.process.bytes == pytest.approx(recorded, abs=1024)
    assert 0.7 <= row["estimate_gib"] / row["measured_gib"] <= 1.3
    assert {r["d"] for r in RECORD["rows"]} >= {576, 1024, 4096}


def test_a_block_is_charged_the_tokens_it_has(base):
    """Two tokens in blocks of 32: J_tt of two tokens, not of 32."""
    info = dict(RECORD["rows"][0]["info"])
    d = info["d_model"]
    two = size_sweep(plan_of(base, info, "float64", "fast", [(15, 2)], 32, 32), workers=1)
    full = size_sweep(plan_of(base, info, "float64", "fast", [(15, 32)], 32, 32), workers=1)
    assert f"J_tt of 2 token(s) {2 * d * d * 8 / GiB:.3g} GiB" in two.worker_parts
    assert full.worker_bytes - two.worker_bytes == 30 * d * d * 8


def test_a_70b_shaped_float64_layer_plans_within_one_24_gib_machine(base):
    """Llama-3-70B's layer (d 8192, d_ff 28672, 64 / 8 heads: 855.6 M parameters), float64,
    one 8-token sequence in one-token blocks, cluster.memory_limit 20GiB: J_tt's columns in
    chunks keep its workspace under 2 GiB, and the worker's need under Dask's pause threshold."""
    info = {"arch": "llama", "n_layers": 80, "d_model": 8192, "max_length": 8192, "vocab_size": 128256,
            "weight_bytes": 141_100_000_000, "block_params": 855_654_400, "n_params": 70_553_706_496,
            "shared_params": 8192}
    budget = size_sweep(plan_of(base, info, "float64", "fast", [(40, 8)], 8, 1,
                                memory_limit="20GiB"), workers=1)
    assert budget.refusal() is None
    assert budget.worker_bytes < 0.8 * 20 * GiB
    work = float(budget.worker_parts.split("J_tt workspace ")[1].split(" GiB")[0])
    assert work < 2
