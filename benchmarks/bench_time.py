"""How long the README's quick start, `make demo` and `make real` take here, against the dry
run's estimate: the one record every quoted time comes from (benchmarks/results/time.json).

    .venv/bin/python benchmarks/bench_time.py [--only quickstart,demo,real]   (after `make venv`,
                                                                              and `make smollm2` for real)
    .venv/bin/python benchmarks/bench_time.py --only real --into out   (make real, timed: the
                                                   stores and reports make real-docs reads)
    .venv/bin/python benchmarks/bench_time.py --reestimate   (the record's sweeps, today's model)
    .venv/bin/python benchmarks/time_docs.py      (then: README, docs/performance.md,
                                                   benchmarks/results/{time,real}.md and
                                                   sweep/budget/measured.py from the record)

Each command runs from the repository root as its own process, as a user types it (the stores
and reports in a temporary directory, so out/ is left alone): its wall seconds, the CPU seconds
of it and its children (user + sys: the sweep's client and its local workers), and the load
average sampled every 15 s. Beside every sweep: its dry run's estimate (size_sweep of the same
plan, sweep/budget/time.py: the wall, the core-seconds by term and the task count).

Calibration (`fit`): the two constants no per-token benchmark measures, the client's own wall
(CLIENT_SECONDS) and every task's fixed cost (TASK_SECONDS), are fitted by least squares to the
quick start's and the demo's sweeps only (wall − the other terms' core-seconds / workers =
CLIENT + TASK x tasks / workers); `make real` is then an out-of-sample check. On a machine other
jobs share, the wall measures them too: a step run at a load average above the cores' count
stands for its client's own CPU seconds plus the rest of its CPU seconds over the workers
(`effective`), and the record and every table say which.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results"
sys.path.insert(0, str(REPO))

# name -> (what it stands for, [(tdos argv with {tmp}, the config a sweep step reads or None)])
STEPS = {
    "quickstart": ("the README's quick start", [
        (["sweep", "configs/tiny.yaml", "--store", "{tmp}/tiny.zarr"], "configs/tiny.yaml"),
        (["status", "{tmp}/tiny.zarr", "--spectra"], None),
        (["analyze", "{tmp}/tiny.zarr", "--out", "{tmp}/tiny-report"], None)]),
    "demo": ("make demo", [
        (["sweep", "configs/demo.yaml", "--store", "{tmp}/demo.zarr"], "configs/demo.yaml"),
        (["analyze", "{tmp}/demo.zarr", "--out", "{tmp}/demo-report"], None),
        (["compare", "{tmp}/demo.zarr:mamba", "{tmp}/demo.zarr:neox", "--out", "{tmp}/demo-compare"],
         None)]),
    "real": ("make real", [
        (["sweep", "configs/smollm2-real.yaml", "--store", "{tmp}/smollm2-real.zarr"],
         "configs/smollm2-real.yaml"),
        (["analyze", "{tmp}/smollm2-real.zarr", "--out", "{tmp}/smollm2-real-report"], None),
        (["sweep", "configs/smollm2-135m.yaml", "--store", "{tmp}/smollm2.zarr"],
         "configs/smollm2-135m.yaml"),
        (["analyze", "{tmp}/smollm2.zarr", "--out", "{tmp}/smollm2-report"], None)]),
}
FITTED = ("quickstart", "demo")      # the runs the two constants are fitted to


def tdos() -> list[str]:
    exe = Path(sys.executable).parent / "tdos"
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "sweep"]


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def client_cpu(proc: subprocess.Popen) -> float:
    """The CPU seconds of `proc` itself (the sweep's client: imports, plan, cluster, progress),
    not of its children (the workers), polled until it ends."""
    import psutil

    last = 0.0
    p = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            times = p.cpu_times()
            last = times.user + times.system
        except psutil.Error:
            break
        time.sleep(0.25)
    return last


def effective(step: dict, cores: int) -> tuple[float, str]:
    """The wall this step would take with the cores to itself: its wall where the load average
    stayed within the cores, else the client's own CPU seconds and the rest spread over the
    workers (a sweep) or all its CPU seconds (one process)."""
    if step["load"][1] <= cores:
        return step["seconds"], "wall"
    workers = step.get("estimate", {}).get("workers", 1)
    own = step.get("client_cpu_seconds", 0.0)
    return own + (step["cpu_seconds"] - own) / workers, "CPU"


class LoadSampler(threading.Thread):
    """The 1-minute load average every `every` seconds until stopped."""

    def __init__(self, every: float = 15.0):
        super().__init__(daemon=True)
        self.every, self.samples, self.halt = every, [], threading.Event()

    def run(self):
        while not self.halt.is_set():
            self.samples.append(os.getloadavg()[0])
            self.halt.wait(self.every)


def estimate(config: str, store: str) -> dict:
    """The dry run of `config` into `store`, as size_sweep computes it."""
    from sweep.budget import size_sweep
    from sweep.config.load import load_config
    from sweep.plan.make import make_plan
    from sweep.budget.time import task_count

    plan = make_plan(load_config(config, {"store": store}))
    budget = size_sweep(plan)
    tasks = sum(task_count(m, plan.config, min(plan.config.inputs.sequences, m.tokens.shape[0]))
                for m in plan.models)
    return {"wall_s": budget.wall_seconds, "core_s": budget.core_seconds, "workers": budget.workers,
            "parts": budget.time.parts, "client_s": budget.time.client, "tasks": tasks}


def run_step(argv: list[str], config: str | None, tmp: str) -> dict:
    args = [a.format(tmp=tmp) for a in argv]
    row = {"argv": ["tdos", *argv]}
    if config:
        row["estimate"] = estimate(config, args[args.index("--store") + 1])
    sampler = LoadSampler()
    sampler.start()
    t0, c0 = time.perf_counter(), children_cpu()
    proc = subprocess.Popen(tdos() + args, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    own = client_cpu(proc)
    assert proc.wait() == 0, f"{' '.join(args)} failed"
    row.update(seconds=time.perf_counter() - t0, cpu_seconds=children_cpu() - c0, client_cpu_seconds=own)
    sampler.halt.set()
    sampler.join()
    row["load"] = [min(sampler.samples), max(sampler.samples)]
    print(json.dumps({k: v for k, v in row.items() if k != "estimate"}), flush=True)
    return row


def fit(runs: dict, cores: int) -> dict:
    """CLIENT_SECONDS and TASK_SECONDS (both >= 0) over the FITTED runs' sweeps, minimising the
    squared log-ratios of estimate to measured: each sweep counts by its relative error, so the
    quick start's 14 s weighs as much as the demo's minutes (absolute least squares would fit
    the largest run alone)."""
    import numpy as np
    from scipy.optimize import least_squares

    rows, how = [], []
    for name in FITTED:
        for step in runs.get(name, {}).get("steps", []):
            e = step.get("estimate")
            if not e:
                continue
            wall, basis = effective(step, cores)
            other = sum(v for k, v in e["parts"].items() if k != "tasks' fixed costs")
            rows.append((other / e["workers"], e["tasks"] / e["workers"], wall))
            how.append(f"{name}: {'wall' if basis == 'wall' else 'CPU seconds (load above the cores)'}")
    if len(rows) < 2:
        return {}
    other, per_task, wall = map(np.array, zip(*rows))

    def residuals(x):
        return np.log((x[0] + other + x[1] * per_task) / wall)
    client, task = least_squares(residuals, x0=[1.0, 1.0], bounds=([0, 0], [np.inf, np.inf])).x
    return {"client_seconds": round(float(client), 3), "task_seconds": round(float(task), 3),
            "runs": list(FITTED),
            "from": how, "loss": "squared log-ratio of estimate to measured"}


def machine() -> str:
    vendor = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name")), platform.processor() or "?")
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores ({vendor}), {mem:.0f} GiB, no GPU"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=",".join(STEPS))
    ap.add_argument("--into", metavar="DIR",
                    help="write the stores and reports under DIR (`out`: make real's own paths, "
                         "which `make real-docs` reads) instead of a temporary directory; a store "
                         "already there is refused, so every timed sweep starts from nothing")
    ap.add_argument("--reestimate", action="store_true",
                    help="today's dry-run estimate of every recorded sweep, and the fit again "
                         "(no command runs: after a change to the time model's measured terms)")
    args = ap.parse_args()
    record_path = OUT / "time.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {"runs": {}}
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.into or scratch
        if args.into and not args.reestimate:
            Path(tmp).mkdir(parents=True, exist_ok=True)
            there = [p for name in args.only.split(",") for argv, _ in STEPS[name][1]
                     for p in (Path(a.format(tmp=tmp)) for a in argv if "{tmp}" in a) if p.exists()]
            if there:
                raise SystemExit(f"bench_time: {', '.join(map(str, there))} exists; move it away "
                                 f"or leave out --into (a timed sweep starts from nothing)")
        if args.reestimate:
            for run in record["runs"].values():
                for step in (s for s in run["steps"] if "estimate" in s):
                    step["estimate"] = estimate(step["argv"][2], f"{tmp}/none.zarr")
        else:
            for name in args.only.split(","):
                label, steps = STEPS[name]
                load0 = os.getloadavg()[0]
                rows = [run_step(argv, cfg, tmp) for argv, cfg in steps]
                record["runs"][name] = {"label": label, "date": time.strftime("%Y-%m-%d"),
                                        "load_before": load0, "steps": rows}
            record.update(machine=machine(), cores=os.cpu_count(),
                          command="python benchmarks/bench_time.py")
    record["fit"] = fit(record["runs"], os.cpu_count() or 1)
    record_path.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
