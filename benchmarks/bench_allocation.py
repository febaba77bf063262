"""More null seeds with fewer tokens each, or fewer seeds with more: which detects smaller |Δ|,
on SmolLM2 (real sweeps, small), against the dry run's power model (sweep/budget/power.py).

One sweep holds a pool: SmolLM2-135M-Instruct (the Q4_1 GGUF, float64) at layer `--layer`
(default 7), the 4 pydoc topics of `make real` (L = 32, BOS at 0), beside `--pool` (default 8)
random_init nulls on all 4 sequences. From the pool, every design (k seeds, first S sequences)
is read many times, each time on another set of k of the pool's seeds: for each, the analysis'
own comparison (analysis/studies/nulls.py NullComparison: the trained value on the nulls'
sequences, se_Δ from its interval and the seeds' spread, t(k − 1)) gives se_Δ and the
detectable |Δ| at the design's Holm step (80 % power, sweep/budget/power.py `detectable`).
The designs set against each other are those of equal null core-seconds in the dry run's
time model: today's (k = 4 on 4 sequences) and the split `tdos sweep --dry-run` proposes for
it (`--designs`, default 4x4,6x2,8x2).

    .venv/bin/python benchmarks/bench_allocation.py [--layer 7] [--pool 8] [--designs 4x4,6x2]

Writes benchmarks/results/bench_allocation.{md,json}: per design and observable, the mean
se_Δ and detectable |Δ| over the seed sets, the model's prediction, and the null core-seconds
the dry run prices the design at. Not part of `make test`.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
GGUF = REPO / "checkpoints" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
TEXT = REPO / "checkpoints" / "smollm2" / "pydoc-topics.jsonl"
OBSERVABLES = {"beta": "β", "density": "window mode density", "log_frobenius": "log ‖J_tt‖_F²",
               "nonnormality": "non-normality of J_tt"}
FAMILY = 45          # the study of make real's configs: tests Holm counts (its dry run says)


def config(layer: int, pool: int, store: Path) -> dict:
    return {"model": {"path": str(GGUF), "name": "smollm2", "dtype": "float64",
                      "nulls": {"random_init": pool, "sequences": 4}},
            "inputs": {"dataset": str(TEXT), "windows": "document", "min_chars": 2000, "bos": "always",
                       "sequences": 4, "length": 32, "seed": 0},
            "layers": [layer], "store": str(store), "compute": {"token_block": 32, "live_every": 0}}


def sweep(doc: dict) -> tuple[object, float]:
    from sweep.config.load import config_from_dict
    from sweep.plan.make import make_plan
    from sweep.run import run_sweep

    plan = make_plan(config_from_dict(doc))
    t = time.perf_counter()
    result = run_sweep(plan, workers=2, progress=False)
    assert result.exit_code == 0, result.errors
    return plan, time.perf_counter() - t


def null_cost(plan, S: int) -> float:
    """One null seed's core-seconds on S sequences in the dry run's time model."""
    import dataclasses

    from sweep.budget.time import sweep_seconds

    null = next(m for m in plan.models if m.null)
    one = dataclasses.replace(null, tokens=null.tokens[:S])
    parts = sweep_seconds(dataclasses.replace(plan, models=(one,)), 2).parts
    return sum(v for k, v in parts.items() if k != "worker start")


def read(store: Path, layer: int, S: int) -> tuple:
    """({observable: Estimate} of the trained model and {null: {...}} of every null, on the
    first S sequences."""
    from analysis.io.store import open_store
    from analysis.studies.nulls import FirstSequences, observables
    from analysis.studies.primary import primary_of, store_settings

    st = open_store(str(store), "smollm2")
    settings, L = store_settings(st), 32
    primary = primary_of(st, settings)
    trained, law = observables(FirstSequences(st, S), layer, L, settings, primary)
    nulls = {n: observables(FirstSequences(st.model(n), S), layer, L, settings, primary, law)[0]
             for n in st.nulls}
    return trained, nulls, settings


def evaluate(trained, nulls, settings, k: int) -> dict:
    """observable -> (mean se_Δ, mean detectable |Δ|) over every k-subset of the pool's seeds."""
    from analysis.studies.nulls import NullComparison

    from sweep.budget.power import detectable

    out = {}
    for name, key in OBSERVABLES.items():
        label = next((o for o in trained if key in o and not o.startswith("top")), None)
        if label is None:
            continue
        ses = []
        for seeds in itertools.combinations(sorted(nulls), k):
            c = NullComparison("smollm2", label, trained[label], {n: nulls[n][label] for n in seeds},
                               settings.level, "random_init", 0)
            ses.append((c.hi - c.lo) / (2 * _q(settings.level, c.dof)))   # se_Δ of its t(k − 1)
        se = float(np.mean(ses))
        out[name] = {"se": se, "detectable": detectable(se, k, 0.05, FAMILY), "sets": len(ses)}
    return out


def _q(level: float, dof: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + level / 2, dof))


def predicted(observable: str, layer: int, k: int, S: int) -> float:
    from sweep.budget.power import se_delta, variance_rows, variances

    v, _ = variances(observable, layer, "random_init", variance_rows())
    return se_delta(v, k, S, 32) if v else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layer", type=int, default=7)
    ap.add_argument("--pool", type=int, default=8)
    ap.add_argument("--designs", default="4x4,6x2,8x2")
    ap.add_argument("--store", default="")
    args = ap.parse_args()
    store = Path(args.store or tempfile.mkdtemp(prefix="bench-allocation-")) / "pool.zarr"
    load0 = os.getloadavg()
    plan, wall = sweep(config(args.layer, args.pool, store))
    rows = []
    for design in args.designs.split(","):
        k, S = (int(x) for x in design.split("x"))
        trained, nulls, settings = read(store, args.layer, S)
        found = evaluate(trained, nulls, settings, k)
        for name, r in found.items():
            rows.append({"design": design, "k": k, "sequences": S, "observable": name,
                         "null_core_seconds": k * null_cost(plan, S),
                         "predicted_se": predicted(name, args.layer, k, S), **r})
            print(json.dumps(rows[-1]), flush=True)
    load1 = os.getloadavg()
    record = {"argv": sys.argv[1:], "date": time.strftime("%Y-%m-%d %H:%M"), "load": [load0, load1],
              "sweep_wall_s": wall, "rows": rows}
    out = REPO / "benchmarks" / "results"
    (out / "bench_allocation.json").write_text(json.dumps(record, indent=1) + "\n")
    lines = [f"# Null seeds against tokens per seed, on SmolLM2 layer {args.layer}", "",
             f"`python benchmarks/bench_allocation.py {' '.join(sys.argv[1:])}`, {record['date']}; "
             f"load average {load0[0]:.1f} before, {load1[0]:.1f} after; the pool's sweep took "
             f"{wall / 60:.1f} min. Mean over every set of k of the pool's {args.pool} seeds; "
             f"detectable |Δ| with 80 % power at α = 0.05 / {FAMILY} (make real's family).", "",
             "| design (k x sequences) | null core-seconds (dry run) | observable | se_Δ measured | "
             "se_Δ predicted | detectable |Δ| | seed sets |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['design']} | {r['null_core_seconds']:.0f} | {r['observable']} | {r['se']:.3g} | "
              f"{r['predicted_se']:.3g} | {r['detectable']:.3g} | {r['sets']} |" for r in rows]
    (out / "bench_allocation.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
