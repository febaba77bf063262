"""Where a sweep's time goes, task by task, against the dry run's model of it.

Runs a config's sweep in this process (run_sweep on a LocalCluster of `--workers` worker
processes, one thread each; the store in a temporary directory) and adds up what every task
reports about itself (sweep/worker/*.py `seconds`: load, hidden, jacobian, eig, write, depth,
memory, stream) by task kind, beside:

- the sweep's wall time and the CPU seconds of this process and its workers (user + sys),
- the dry run's parts for the same plan (sweep/budget/time.py `parts`): per-token work, walks,
  token memory, layer set-up, loads, worker start, per-task fixed costs and the client's own
  wall,

so that each term of the time model can be set against the phase that measures it.

    .venv/bin/python benchmarks/bench_task_costs.py configs/demo.yaml [--workers 2]

Prints one JSON object (and writes it to `--out`). Not part of `make test`.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def kind_of(result: dict) -> str:
    """The task kind a result dict comes from (sweep/worker/*.py return values)."""
    for key, kind in (("walk_layers", "depth"), ("memory_layer", "memory"), ("residual_seqs", "residual"),
                      ("a_log_layers", "a_log"), ("block", "block")):
        if key in result:
            return kind
    return "other"


def cpu() -> float:
    self, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return self.ru_utime + self.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> None:
    from distributed import Client, LocalCluster

    from sweep.budget import size_sweep
    from sweep.config.load import load_config
    from sweep.plan.make import make_plan
    from sweep.run import run_sweep

    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    store = Path(tempfile.mkdtemp(prefix="task-costs-")) / "run.zarr"
    load0, t0, c0 = os.getloadavg(), time.perf_counter(), cpu()
    plan = make_plan(load_config(args.config, {"store": str(store)}))
    budget = size_sweep(plan, workers=args.workers)
    t_plan = time.perf_counter() - t0
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        t_cluster = time.perf_counter() - t0 - t_plan
        t1 = time.perf_counter()
        result = run_sweep(plan, client=client, progress=False)
        t_sweep = time.perf_counter() - t1
    wall, used = time.perf_counter() - t0, cpu() - c0
    assert result.exit_code == 0, result.errors
    by_kind: dict = collections.defaultdict(collections.Counter)
    count = collections.Counter()
    for r in result.results:
        k = kind_of(r)
        count[k] += 1
        by_kind[k].update({phase: float(s) for phase, s in r.get("seconds", {}).items()})
    out = {"config": args.config, "workers": args.workers, "date": time.strftime("%Y-%m-%d %H:%M"),
           "load": [load0, os.getloadavg()], "wall_s": wall, "cpu_s": used,
           "client_s": {"plan_and_dry_run": t_plan, "cluster_start": t_cluster, "run_sweep": t_sweep},
           "tasks": dict(count), "task_seconds": {k: dict(v) for k, v in by_kind.items()},
           "in_tasks_s": sum(sum(v.values()) for v in by_kind.values()),
           "estimate": {"core_seconds": budget.core_seconds, "parts": budget.time.parts,
                        "wall_s": budget.wall_seconds}}
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
