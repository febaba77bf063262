"""Sweep throughput vs worker count, Dask's share of the wall, and full-size sweeps by CLI.

    .venv/bin/python benchmarks/bench_workers.py [--work /tmp/tdos-bench] [--out benchmarks/results]
        [--parts scaling,m370,paper]

scaling  a real `run_sweep` on a d = 1024 Mamba with the 370M shapes but 4 layers (layer 2),
         on 1 and 2 local workers (1 thread each): blocks per second, and Dask's share of
         the wall = 1 - (sum of in-task compute) / (workers x wall), and the sweep-level
         per-block cost against the eigensolver alone = workers x wall / (sum of the tasks'
         eig seconds), everything a sweep pays included. The wall starts at
         run_sweep on a running cluster (store already made) and covers plan, submit,
         every task (model load on each worker included, as in-task compute) and verdict.
m370     `tdos sweep` of the 48-layer Mamba-370M architecture (random init, saved once by
         bench_block.save_models) at layer 24, L = 128, on `tdos cluster up --workers 2`:
         wall time, and peak RSS (VmHWM) of each worker process.
paper    the same for configs/mamba370m-paper.yaml with every model path pointed at the
         local random-init directory (the store path moved under --work).

Writes <out>/bench_workers.{md,json}.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from bench_block import save_models  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TDOS = str(Path(sys.executable).parent / "tdos")


def save_small_mamba(root: Path) -> Path:
    """Mamba with the 370M block shapes and 4 layers, random init (seed 0), saved once."""
    import torch
    from transformers import MambaConfig, MambaForCausalLM

    path = root / "mamba-d1024-4L"
    if not (path / "config.json").is_file():
        torch.manual_seed(0)
        cfg = MambaConfig(vocab_size=50280, hidden_size=1024, num_hidden_layers=4, state_size=16,
                          expand=2, conv_kernel=4, time_step_rank=64)
        MambaForCausalLM(cfg).save_pretrained(str(path))
    return path


# ---------------------------------------------------------------- scaling: run_sweep, 1 and 2 workers

def scaling(work: Path, workers=(1, 2), sequences: int = 3, length: int = 64, block: int = 8) -> list[dict]:
    from cluster.build import connect
    from sweep.config.load import config_from_dict
    from sweep.plan.make import make_plan
    from sweep.run import run_sweep
    from sweep.store.writer import open_store

    path = save_small_mamba(work / "models")
    rows = []
    for n in workers:
        store = work / f"scaling-{n}w.zarr"
        shutil.rmtree(store, ignore_errors=True)
        cfg = config_from_dict({"model": {"path": str(path)}, "layers": [2], "store": str(store),
                                "inputs": {"sequences": sequences, "length": length, "seed": 0},
                                "compute": {"token_block": block, "live_every": 0},
                                "cluster": {"workers": n, "threads_per_worker": 1}})
        open_store(make_plan(cfg))               # client-side plan + store creation: not timed
        with connect(cfg.cluster) as client:
            t = time.perf_counter()
            res = run_sweep(cfg, resume=True, client=client, progress=False)
            wall = time.perf_counter() - t
            peaks = list(client.run(_peak_rss_gib).values())
        blocks = [r for r in res.results if "block" in r]
        # every task's own seconds: the A_log task (which loads the model on its worker) too
        compute = sum(sum(r["seconds"].values()) for r in res.results)
        phase = {k: sum(r["seconds"][k] for r in blocks) for k in blocks[0]["seconds"]}
        # the whole sweep's worker-seconds per second of eigensolver: model load, hidden
        # states, prefixes, J_tt, writes, Dask, all included, amortized as a sweep pays them
        rows.append({"workers": n, "blocks": len(blocks), "tokens_per_block": block, "wall_s": wall,
                     "blocks_per_s": len(blocks) / wall, "in_task_compute_s": compute,
                     "dask_share": 1 - compute / (n * wall), "exit_code": res.exit_code,
                     "phase_s": phase, "wall_over_eig": n * wall / phase["eig"],
                     "worker_peak_rss_gib": peaks})
        print(rows[-1], flush=True)
    return rows


def _peak_rss_gib():
    """Peak RSS (VmHWM) of the calling process; ru_maxrss is inherited across exec."""
    from pathlib import Path as P

    line = next(x for x in P("/proc/self/status").read_text().splitlines() if x.startswith("VmHWM"))
    return int(line.split()[1]) / 2**20


# ---------------------------------------------------------------- full-size sweeps through the CLI

def cli_sweep(config: Path, work: Path, workers: int = 2) -> dict:
    """`tdos cluster up` + `tdos sweep --scheduler`: wall of the sweep, per-worker peak RSS."""
    from distributed import Client

    sched = work / "scheduler.json"
    sched.unlink(missing_ok=True)
    up = subprocess.Popen([TDOS, "cluster", "up", "--workers", str(workers), "--scheduler-file", str(sched)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        while not sched.is_file():
            time.sleep(0.5)
        address = json.loads(sched.read_text())["address"]
        t = time.perf_counter()
        run = subprocess.run([TDOS, "sweep", str(config), "--scheduler", address],
                             capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - t
        with Client(address) as client:
            peaks = list(client.run(_peak_rss_gib).values())
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=60)
    store = yaml.safe_load(config.read_text())["store"]
    status = subprocess.run([TDOS, "status", store], capture_output=True, text=True, cwd=ROOT).stdout
    return {"config": str(config), "workers": workers, "wall_s": wall, "exit_code": run.returncode,
            "last_lines": run.stdout.strip().splitlines()[-2:], "worker_peak_rss_gib": peaks,
            "status": status}


def m370_config(work: Path, sequences: int = 2, length: int = 128, block: int = 32) -> Path:
    path = save_models(work / "models", ["mamba-370m"])["mamba-370m"][0]
    store = work / "m370-l24.zarr"
    shutil.rmtree(store, ignore_errors=True)
    raw = {"model": {"path": str(path)}, "layers": [24], "store": str(store),
           "inputs": {"sequences": sequences, "length": length, "seed": 0},
           "compute": {"token_block": block, "live_every": 0}}
    out = work / "m370-l24.yaml"
    out.write_text(yaml.safe_dump(raw))
    return out


def paper_config(work: Path) -> Path:
    """configs/mamba370m-paper.yaml with local model paths and the store under `work`."""
    path = save_models(work / "models", ["mamba-370m"])["mamba-370m"][0]
    raw = yaml.safe_load((ROOT / "configs/mamba370m-paper.yaml").read_text())
    for m in raw["models"]:
        m["path"] = str(path)
    raw["store"] = str(work / "paper-local.zarr")
    raw.setdefault("compute", {})["live_every"] = 0
    shutil.rmtree(raw["store"], ignore_errors=True)
    out = work / "paper-local.yaml"
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


# ---------------------------------------------------------------- report

def markdown(res: dict) -> str:
    la = lambda v: " / ".join(f"{x:.1f}" for x in v)                     # noqa: E731
    out = [f"Run {res['date']}, `{res['command']}`; {os.cpu_count()} CPUs shared, load average "
           f"{la(res['loadavg_before'])} before, {la(res['loadavg_after'])} after.", ""]
    if res.get("scaling"):
        out += ["run_sweep, Mamba d=1024 (370M shapes, 4 layers), layer 2, fp32, 1 thread per worker.", "",
                "| workers | blocks x tokens | wall s | blocks/s | in-task compute s | Dask share "
                "| eig s | workers x wall / eig | worker peak RSS GiB |", "|" + "---|" * 9]
        for r in res["scaling"]:
            out.append(f"| {r['workers']} | {r['blocks']} x {r['tokens_per_block']} | {r['wall_s']:.1f} "
                       f"| {r['blocks_per_s']:.3f} | {r['in_task_compute_s']:.1f} | {100 * r['dask_share']:.1f} % "
                       f"| {r['phase_s']['eig']:.1f} | {r['wall_over_eig']:.2f} "
                       f"| {', '.join(f'{p:.2f}' for p in r['worker_peak_rss_gib'])} |")
    for key, title in (("m370", "Mamba-370M architecture, layer 24, L=128"),
                       ("paper", "configs/mamba370m-paper.yaml on the random-init 370M")):
        if res.get(key):
            r = res[key]
            out += ["", f"`tdos sweep` ({title}), {r['workers']} workers: wall {r['wall_s']:.0f} s, exit "
                    f"{r['exit_code']}; worker peak RSS GiB: "
                    f"{', '.join(f'{p:.2f}' for p in r['worker_peak_rss_gib'])}.", "", "```",
                    r["status"].rstrip(), "```"]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="/tmp/tdos-bench")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--parts", default="scaling,m370,paper")
    args = ap.parse_args()
    work, parts = Path(args.work), args.parts.split(",")
    res = {"command": "benchmarks/bench_workers.py " + " ".join(sys.argv[1:]),
           "date": time.strftime("%Y-%m-%d %H:%M"), "loadavg_before": os.getloadavg()}
    if "scaling" in parts:
        res["scaling"] = scaling(work)
    if "m370" in parts:
        res["m370"] = cli_sweep(m370_config(work), work)
        print(res["m370"], flush=True)
    if "paper" in parts:
        res["paper"] = cli_sweep(paper_config(work), work)
        print(res["paper"], flush=True)
    res["loadavg_after"] = os.getloadavg()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "bench_workers" if args.parts == "scaling,m370,paper" else "bench_workers-" + "-".join(parts)
    (out / f"{stem}.json").write_text(json.dumps(res, indent=1))
    (out / f"{stem}.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
