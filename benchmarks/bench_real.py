"""Wall time of `make real` against its dry runs' estimates, as a new user runs it.

    .venv/bin/python benchmarks/bench_real.py        (after `make venv` and `make smollm2`)
    .venv/bin/python benchmarks/bench_real.py --reestimate   (today's dry runs beside that record)

runs, from the repository root, what `make real` runs: for each of its two configs (the
representative layer's, configs/smollm2-real.yaml, and the layers across depth,
configs/smollm2-135m.yaml) the dry run (its "~X core-hours on CPU (~Y min wall on N
worker(s))" line read back), the sweep and `tdos analyze`, each as its own process, into a
store and report of its own (out/bench-real*, so make real's are left alone). It writes results/real.{json,md} with the
seconds of every step, the CPU seconds its processes used (user + sys of the waited-for
children: the sweep and its local workers), the load average sampled every 15 s while it ran,
and the core count. On a shared machine the wall time stretches with the load: the record
sets the estimate beside both the measured wall and the CPU time spread over the workers
(CPU seconds / workers), which is what the wall would be with the cores to itself.
"""
from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results"
# make real's two sweeps, each into a store and report of its own: (config, store, report)
RUNS = (("configs/smollm2-real.yaml", "out/bench-real.zarr", "out/bench-real-report"),
        ("configs/smollm2-135m.yaml", "out/bench-real-layers.zarr", "out/bench-real-layers-report"))
ESTIMATE = re.compile(r"~([\d.]+) core-hours on CPU \(~([\d.]+) min wall on (\d+) worker")


def tdos() -> list[str]:
    """The `tdos` beside this interpreter (the venv's), else `python -m sweep`."""
    exe = Path(sys.executable).parent / "tdos"
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "sweep"]


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(args: list[str]) -> dict:
    """Run `tdos args`, return its seconds, CPU seconds and stdout."""
    t0, c0 = time.perf_counter(), cpu_seconds()
    out = subprocess.run(tdos() + args, cwd=REPO, check=True, capture_output=True, text=True)
    return {"argv": ["tdos", *args], "seconds": time.perf_counter() - t0,
            "cpu_seconds": cpu_seconds() - c0, "stdout": out.stdout}


class LoadSampler(threading.Thread):
    """The 1-minute load average every `every` seconds until stopped."""

    def __init__(self, every=15.0):
        super().__init__(daemon=True)
        self.every, self.samples, self.stop = every, [], threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self.stop.wait(self.every)


def reestimate() -> None:
    """`--reestimate`: the dry runs of results/real.json's configs again, with today's
    sweep/budget/time.py, beside the wall times measured then (a recalibrated estimate, in sample
    when its constants were fitted to this record)."""
    record = json.loads((OUT / "real.json").read_text())
    for step, (cfg, store, _) in zip(record["steps"], RUNS):
        dry = timed(["sweep", cfg, "--dry-run", "--store", store + ".none"])
        step["reestimate_wall_min"] = float(ESTIMATE.search(dry["stdout"]).group(2))
    record["reestimate_over_wall"] = (sum(s["reestimate_wall_min"] for s in record["steps"])
                                      / record["sweep_wall_min"])
    (OUT / "real.json").write_text(json.dumps(record, indent=1) + "\n")
    (OUT / "real.md").write_text(summary(record))
    print(summary(record))


def main() -> None:
    if "--reestimate" in sys.argv:
        return reestimate()
    if "--keep" not in sys.argv:
        for _, store, _ in RUNS:                          # from scratch, as a fresh clone
            shutil.rmtree(REPO / store, ignore_errors=True)
    sampler, steps, analyses = LoadSampler(), [], []
    sampler.start()
    for cfg, store, report in RUNS:
        dry = timed(["sweep", cfg, "--dry-run", "--store", store])
        core_h, wall_min, workers = ESTIMATE.search(dry.pop("stdout")).groups()
        run = timed(["sweep", cfg, "--store", store])
        run.pop("stdout")
        steps.append({"config": cfg, "dry_run_seconds": dry["seconds"],
                      "estimate_core_hours": float(core_h), "estimate_wall_min": float(wall_min),
                      "workers": int(workers), "sweep": run})
        print(f"{cfg}: estimate {wall_min} min, measured {run['seconds'] / 60:.1f} min wall, "
              f"{run['cpu_seconds'] / 60:.1f} CPU min", flush=True)
        analyses.append(timed(["analyze", store, "--out", report]))
        analyses[-1].pop("stdout")
    sampler.stop.set()
    estimate = sum(s["estimate_wall_min"] for s in steps)
    wall = sum(s["sweep"]["seconds"] for s in steps) / 60
    idle = sum(s["sweep"]["cpu_seconds"] / s["workers"] for s in steps) / 60
    analyze = {"seconds": sum(a["seconds"] for a in analyses), "runs": analyses}
    record = {"command": "python benchmarks/bench_real.py", "cpus": os.cpu_count(),
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "steps": steps, "analyze": analyze,
              "load_samples": sampler.samples,
              "load_mean": sum(sampler.samples) / max(len(sampler.samples), 1),
              "estimate_wall_min": estimate, "sweep_wall_min": wall,
              "sweep_cpu_min_per_worker": idle,
              "estimate_over_wall": estimate / wall,
              "total_wall_min": wall + analyze["seconds"] / 60}
    OUT.mkdir(exist_ok=True)
    (OUT / "real.json").write_text(json.dumps(record, indent=1) + "\n")
    (OUT / "real.md").write_text(summary(record))
    print(summary(record))


def summary(r: dict) -> str:
    lines = ["# `make real`, timed against its dry runs", "",
             f"`{r['command']}` on {r['cpus']} cores, {r['date']}; load average while it ran "
             f"{r['load_mean']:.1f} (min {min(r['load_samples']):.1f}, max "
             f"{max(r['load_samples']):.1f}; the sweep's own two workers and its client make "
             f"about 2 to 3: above that, other jobs shared the cores).", "",
             "| step | dry-run estimate, min wall | measured, min wall | CPU min / worker |",
             "|---|---|---|---|"]
    lines += [f"| `tdos sweep {s['config']}` | {s['estimate_wall_min']:.1f} | "
              f"{s['sweep']['seconds'] / 60:.1f} | {s['sweep']['cpu_seconds'] / 60 / s['workers']:.1f} |"
              for s in r["steps"]]
    lines += [f"| `tdos analyze` (both stores) | | {r['analyze']['seconds'] / 60:.1f} | |",
              f"| sweeps | {r['estimate_wall_min']:.1f} | {r['sweep_wall_min']:.1f} | "
              f"{r['sweep_cpu_min_per_worker']:.1f} |",
              f"| **make real** | | **{r['total_wall_min']:.1f}** | |", "",
              f"The dry runs' estimate is {r['estimate_over_wall']:.2f} x the measured sweep wall "
              f"time (within 30 %: between 0.70 and 1.30).", ""]
    if "reestimate_over_wall" in r:
        lines += [f"Re-estimated afterwards (`bench_real.py --reestimate`) with sweep/budget/time.py's "
                  f"layer-setup term, which was fitted to these two sweeps: "
                  + ", ".join(f"{s['config']} {s['reestimate_wall_min']:.1f} min"
                              for s in r["steps"])
                  + f"; {r['reestimate_over_wall']:.2f} x the measured wall (in sample).", ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
