"""Cost of one sweep block at d = 1024, phase by phase, against the eigensolver floor.

    .venv/bin/python benchmarks/bench_block.py [--models /tmp/tdos-bench/models]
        [--out benchmarks/results] [--tokens 8] [--prefix 128] [--naive 31,127]

One block = T tokens of one (layer, sequence): hidden states (advancing the cached
residual stream by one layer, what a sweep task pays when it reaches a new layer),
J_tt (+ Δ_t for Mamba), eig, the zarr chunk + ledger write through sweep.store.writer, and the
Dask overhead of running the same block as a task on a real 1-worker LocalCluster
(task wall seen by the client minus the compute the task reports). fp32 and fp64; 1 and 2
threads. Models are random-init from their configs (no download), saved once with
save_pretrained and loaded by sweep.worker.model.load_model:

    mamba-370m       MambaConfig d 1024, 48 layers, d_state 16, expand 2, conv 4, dt_rank 64;
                     layer 24 (random init: A_log = log(1..16); fine for timing)
    gpt2-medium-2L   GPT2Config n_embd 1024, n_head 16, only 2 of 24 layers built; layer 1
    pythia-410m-2L   GPTNeoXConfig 1024, 16 heads, ffn 4096, rotary_pct 0.25, 2 of 24 layers; layer 1

The in-process block runs under each --cpu-linalg choice (default auto, what a sweep uses;
`--cpu-linalg auto,torch` puts the two libraries side by side in one run), and the J_tt
product alone is timed through torch's BLAS and OpenBLAS.
Also: torch vs scipy vs numpy eigvals (time and agreement with an fp64 reference), minor
page faults of J_tt formation, peak RSS, and the naive route (autograd of the unmodified HF
MambaBlock over h[:t+1], its (t, t) block) at the --naive positions. Writes
<out>/bench_block.{md,json}.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import resource
import shutil
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from sweep.numerics import linalg

D_MODEL = 1024
DTYPES = ("float32", "float64")
THREADS = (1, 2)


def model_configs() -> dict:
    """name -> (transformers config, class name, layer benchmarked)."""
    from transformers import GPT2Config, GPTNeoXConfig, MambaConfig

    return {
        "mamba-370m": (MambaConfig(vocab_size=50280, hidden_size=1024, num_hidden_layers=48,
                                   state_size=16, expand=2, conv_kernel=4, time_step_rank=64),
                       "MambaForCausalLM", 24),
        "gpt2-medium-2L": (GPT2Config(n_embd=1024, n_layer=2, n_head=16), "GPT2LMHeadModel", 1),
        "pythia-410m-2L": (GPTNeoXConfig(vocab_size=50304, hidden_size=1024, num_hidden_layers=2,
                                         num_attention_heads=16, intermediate_size=4096,
                                         rotary_pct=0.25), "GPTNeoXForCausalLM", 1),
    }


def save_models(root: Path, names=None) -> dict:
    """Random-init each model (seed 0) and save_pretrained it under root/<name>, once."""
    import transformers

    out = {}
    for name, (cfg, cls, layer) in model_configs().items():
        if names is not None and name not in names:
            continue
        path = root / name
        if not (path / "config.json").is_file():
            torch.manual_seed(0)
            getattr(transformers, cls)(cfg).save_pretrained(str(path))
        out[name] = (path, layer)
    return out


# ---------------------------------------------------------------- threads, memory, timing

def set_threads(n: int) -> None:
    """torch (MKL/OpenMP) and every OpenBLAS loaded (scipy's, numpy's) to n threads."""
    torch.set_num_threads(n)
    for lib in set(re.findall(r"(/\S*openblas\S*\.so)", Path("/proc/self/maps").read_text())):
        so = ctypes.CDLL(lib)
        for sym in ("scipy_openblas_set_num_threads", "scipy_openblas_set_num_threads64_"):
            if hasattr(so, sym):
                getattr(so, sym)(ctypes.c_int(n))


def peak_rss_gib() -> float:
    """This process's peak RSS (VmHWM). Not ru_maxrss: Linux carries that across exec, so a
    spawned Dask worker would report its parent's peak."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmHWM"))
    return int(line.split()[1]) / 2**20                                     # kB -> GiB


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def timed(f, reps: int):
    """(min seconds, median seconds, last result) of `reps` calls after one warm-up."""
    out = f()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times), out


# ---------------------------------------------------------------- eigensolvers

def eig_torch(J):                       # (T, d, d) torch -> (T, d) complex numpy
    return torch.linalg.eigvals(J).numpy()


def eig_scipy(J):
    import scipy.linalg

    A = J.numpy().copy()                # overwrite_a destroys the input: time on a copy
    return np.stack([scipy.linalg.eigvals(a, check_finite=False, overwrite_a=True) for a in A])


def eig_numpy(J):
    return np.linalg.eigvals(J.numpy())


SOLVERS = {"torch.linalg.eigvals": eig_torch, "scipy.linalg.eigvals": eig_scipy,
           "numpy.linalg.eigvals": eig_numpy}


def eig_error(z: np.ndarray, ref: np.ndarray) -> float:
    """Max over matrices of the largest gap between sorted |ζ|, plus |trace mismatch|/d."""
    gap = np.abs(np.sort(np.abs(z), -1) - np.sort(np.abs(ref), -1)).max()
    tr = np.abs(z.sum(-1) - ref.sum(-1)).max() / z.shape[-1]
    return float(max(gap, tr))


def compare_solvers(J32: torch.Tensor, reps: int) -> list[dict]:
    """Time each solver on the same J (fp32 and its fp64 cast) at 1 and 2 threads."""
    ref = np.linalg.eigvals(J32.double().numpy())                          # (T, d)
    rows = []
    for dtype in DTYPES:
        J = J32.to(getattr(torch, dtype))
        for threads in THREADS:
            set_threads(threads)
            for name, solve in SOLVERS.items():
                best, med, z = timed(lambda: solve(J), reps)
                rows.append({"dtype": dtype, "threads": threads, "solver": name,
                             "s_per_matrix": best / J.shape[0], "median_s_per_matrix": med / J.shape[0],
                             "out_dtype": str(z.dtype), "err_vs_fp64": eig_error(z, ref)})
    return rows


def compare_gemm(d: int, reps: int) -> list[dict]:
    """The Mamba J_tt product (d, 2d)@(2d, d) into a reused (d, d), per library, 1 thread."""
    set_threads(1)
    rows = []
    for dtype in DTYPES:
        g = torch.Generator().manual_seed(0)
        a = torch.randn(d, 2 * d, generator=g, dtype=getattr(torch, dtype))
        b = torch.randn(2 * d, d, generator=g, dtype=a.dtype)
        out = a.new_empty(d, d)
        for choice in ("torch", "openblas"):
            with linalg.using(choice):
                best, med, _ = timed(lambda: linalg.matmul(a, b, out=out), reps)
            rows.append({"dtype": dtype, "library": choice, "d": d, "s": best, "median_s": med,
                         "gflops": 2 * d * 2 * d * d / best / 1e9})
    return rows


def _linalg_name(choice: str, libraries: dict) -> str:
    """"auto" -> "auto: gemm openblas, eig32 torch, eig64 openblas"; explicit choices as given."""
    return choice if choice != "auto" else f"auto: {linalg.describe(libraries)}"


# ---------------------------------------------------------------- the block, in process

def bench_config(models: dict, store: Path, length: int, T: int):
    """One store, one group per (model, dtype), each planning `length` tokens at its layer."""
    from sweep.config.load import config_from_dict

    entries = [{"path": str(path), "dtype": dtype, "name": f"{name}-{dtype}", "layers": {layer: length}}
               for name, (path, layer) in models.items() for dtype in DTYPES]
    return config_from_dict({"models": entries, "inputs": {"sequences": 1, "length": length, "seed": 0},
                             "layers": [0], "store": str(store),
                             "compute": {"token_block": T, "live_every": 0}})


def block_task(plan, root, group: str, t0: int):
    """The planned BlockTask of `group` starting at token t0 (`plan` from sweep.plan.make.make_plan,
    `root` the store sweep.store.writer.open_store made from it), its residual h_l stored first
    (the residual task runs here)."""
    from sweep.tasks import BlockTask, ResidualTask, pending_tasks
    from sweep.worker.state import WorkerState
    from sweep.worker.task import run_task

    tasks, state = pending_tasks(plan, root), WorkerState()
    for t in tasks:
        if isinstance(t, ResidualTask) and t.model.group == group:
            run_task(t, state=state)
    return next(t for t in tasks if isinstance(t, BlockTask) and t.model.group == group and t.t0 == t0)


def phases(model, task, g, reps: int) -> dict:
    """Seconds per phase of one block, in this process, at the current thread count.

    J_tt goes into the reused per-thread buffer with glibc's thresholds raised, as on a
    worker (sweep/worker/state.py): a fresh (T, d, d) block per call would add its page faults.
    """
    from sweep.numerics.spectra import eigvals
    from sweep.store import writer as store
    from sweep.worker.state import WorkerState

    state = WorkerState()
    state.keep_temporaries_on_heap()

    tokens = torch.from_numpy(np.asarray(g["tokens"][task.seq, : task.n_ctx]))
    h_prev = model.hidden_states(tokens, task.layer - 1)                   # (n_ctx, d)
    with torch.no_grad():
        hid, _, h = timed(lambda: model.block(task.layer - 1).forward(h_prev), reps)
    block = model.block(task.layer)

    def jac():
        buf = state.jacobian_buffer(task.t1 - task.t0, model.d_model, model.dtype, model.device)
        J = block.jacobians(h, task.t0, task.t1, out=buf)                 # (T, d, d)
        delta = block.delta(h, task.t0, task.t1)                           # (T, d_inner) | None
        return J, delta

    f0 = minor_faults()
    jt, _, (J, delta) = timed(jac, reps)
    faults = (minor_faults() - f0) / (reps + 1) / J.shape[0]
    et, _, eig = timed(lambda: eigvals(J).numpy(), reps)
    d_np = None if delta is None else delta.numpy()
    values = store.BlockValues(eig, d_np, jacobian_path="hand-written")
    wt, _, _ = timed(lambda: store.write_block(g, task.row, task.seq, task.block, task.t0, values), reps)
    return {"hidden": hid, "jacobian": jt, "eig": et, "write": wt,
            "jac_minor_faults_per_token": faults, "J": J}


# ---------------------------------------------------------------- the block, as a Dask task

def _task_with_faults(task):
    """run_task on the worker, plus the minor page faults it took and the worker's threads."""
    import resource as r

    import torch as th

    from sweep.worker.task import run_task

    f0 = r.getrusage(r.RUSAGE_SELF).ru_minflt
    out = run_task(task)
    out["minor_faults"] = r.getrusage(r.RUSAGE_SELF).ru_minflt - f0
    out["torch_threads"] = th.get_num_threads()
    return out


def _worker_peak_gib():
    from pathlib import Path as P

    line = next(x for x in P("/proc/self/status").read_text().splitlines() if x.startswith("VmHWM"))
    return int(line.split()[1]) / 2**20


def dask_overhead(client, task, reps: int) -> dict:
    """Client wall minus in-task compute of the same block, on a fresh 1-worker cluster."""
    client.restart()                      # fresh worker: no cached model, fresh ru_maxrss
    cold = client.submit(_task_with_faults, task, pure=False).result()
    walls, overheads, inner = [], [], []
    for _ in range(reps):
        t = time.perf_counter()
        r = client.submit(_task_with_faults, task, pure=False).result()
        wall = time.perf_counter() - t
        compute = sum(r["seconds"].values())
        walls.append(wall)
        overheads.append(wall - compute)
        inner.append(r)
    peak = max(client.run(_worker_peak_gib).values())
    best = min(range(reps), key=lambda i: walls[i])
    return {"cold_task_s": sum(cold["seconds"].values()), "task_wall_s": walls[best],
            "overhead_s": statistics.median(overheads), "overheads_s": overheads,
            "in_task_seconds": inner[best]["seconds"], "in_task_minor_faults": inner[best]["minor_faults"],
            "worker_torch_threads": inner[best]["torch_threads"], "worker_peak_rss_gib": peak}


# ---------------------------------------------------------------- the naive route

def naive_jtt(hf_block, h: torch.Tensor, t: int) -> torch.Tensor:
    """(L, d) -> (d, d): autograd of the stock HF block's output row t over all of h[:t+1],
    then its (t, t) block. vectorize=False: d backward passes over the whole prefix (vmap
    over the HF scan would need d copies of the (t, d_inner, N) state history)."""
    def row_t(x):                                                          # (t+1, d) -> (d,)
        return hf_block(x[None])[0, t]

    full = torch.autograd.functional.jacobian(row_t, h[: t + 1], vectorize=False)  # (d, t+1, d)
    return full[:, t, :]


def bench_naive(model, layer: int, h: torch.Tensor, positions, ours: dict) -> list[dict]:
    """Naive J_tt at each t (timed once: minutes each), checked against the structured J_tt.

    ours: {"jacobian": s/token of the structured J_tt, "block": s/token of the whole block}."""
    hf_block = model.hf.backbone.layers[layer]
    hf_block.requires_grad_(False)
    rows = []
    for t in positions:
        t_start = time.perf_counter()
        Jn = naive_jtt(hf_block, h, t)
        secs = time.perf_counter() - t_start
        Jo = model.block(layer).jacobians(h, t, t + 1)[0]
        rows.append({"t": t, "naive_s_per_token": secs, "ours_jacobian_s_per_token": ours["jacobian"],
                     "ours_block_s_per_token": ours["block"], "ratio_jacobian": secs / ours["jacobian"],
                     "ratio_block": secs / ours["block"],
                     "max_abs_diff_vs_structured": float((Jn - Jo).abs().max())})
        print(f"naive t={t}: {secs:.1f} s/token, {secs / ours['block']:.0f}x our whole block per token",
              flush=True)
    return rows


# ---------------------------------------------------------------- driver

def run(args) -> dict:
    from cluster.build import connect
    from cluster.config import ClusterConfig
    from sweep.plan.make import make_plan
    from sweep.store import writer as st
    from sweep.worker.model import load_model
    from sweep.worker.plugin import WorkerStatePlugin

    work = Path(args.work)
    models = save_models(work / "models", args.models)
    store = work / "bench_block.zarr"
    shutil.rmtree(store, ignore_errors=True)
    cfg = bench_config(models, store, args.prefix + args.tokens, args.tokens)
    sweep_plan = make_plan(cfg)
    root = st.open_store(sweep_plan)                   # creates the store and its model groups
    res = {"meta": meta(args), "blocks": [], "solvers": [], "naive": []}
    J_solver = None                       # the Mamba fp32 J_tt when Mamba is benchmarked
    with connect(ClusterConfig(workers=1, threads_per_worker=1)) as client:
        client.register_plugin(WorkerStatePlugin())      # as sweep.run does: run_task's state
        for name, (path, layer) in models.items():
            for dtype in DTYPES:
                group = f"{name}-{dtype}"
                task = block_task(sweep_plan, root, group, args.prefix)
                model = load_model(path, dtype=dtype)
                grp = st.open_group(str(store), group)
                g = {k: grp[k] for k in grp.array_keys()}        # opened once, as a worker does
                for threads in THREADS:
                    set_threads(threads)
                    for choice in args.cpu_linalg:
                        with linalg.using(choice) as libraries:
                            # 2 threads on 2 shared cores can be very slow (OpenMP spin under load): 1 repeat
                            ph = phases(model, task, g, args.reps if threads == 1 else 1)
                        J = ph.pop("J")
                        res["blocks"].append({"model": name, "layer": layer, "dtype": dtype, "threads": threads,
                                              "cpu_linalg": _linalg_name(choice, libraries), "tokens": J.shape[0], **ph})
                        print(res["blocks"][-1], flush=True)
                if dtype == "float32" and (name.startswith("mamba") or J_solver is None):
                    J_solver = J.clone()                 # J lives in the reused buffer
                del model
                set_threads(1)
                dk = dask_overhead(client, task, args.reps)
                for row in res["blocks"][-len(THREADS) * len(args.cpu_linalg):]:
                    row["dask"] = dk
                print(group, "dask", dk, flush=True)
    res["gemm"] = compare_gemm(D_MODEL, args.reps + 4)
    if args.solver_matrices:
        res["solvers"] = compare_solvers(J_solver[: args.solver_matrices], args.reps)
    if args.naive:
        set_threads(1)
        res["naive"] = naive_section(models, args, res["blocks"])
    res["meta"]["peak_rss_gib_bench_process"] = peak_rss_gib()
    res["meta"]["loadavg_after"] = os.getloadavg()
    return res


def naive_section(models: dict, args, blocks: list[dict]) -> list[dict]:
    """Naive vs structured on Mamba-370M fp32, 1 thread (ours: this run's 1-thread block)."""
    from sweep.worker.model import load_model

    name = next(n for n in models if n.startswith("mamba"))
    path, layer = models[name]
    model = load_model(path, dtype="float32")
    tokens = torch.from_numpy(np.random.default_rng(0).integers(0, model.vocab_size, max(args.naive) + 1))
    h = model.hidden_states(tokens, layer)                                  # (t_max+1, d)
    row = next(r for r in blocks if r["model"] == name and r["dtype"] == "float32"
               and r["threads"] == 1)
    ours = {"jacobian": row["jacobian"] / row["tokens"], "block": block_wall(row) / row["tokens"]}
    return bench_naive(model, layer, h, args.naive, ours)


def block_wall(row: dict) -> float:
    """Seconds of one block as a sweep task: every phase plus the Dask overhead."""
    return row["hidden"] + row["jacobian"] + row["eig"] + row["write"] + row["dask"]["overhead_s"]


def meta(args) -> dict:
    return {"command": "benchmarks/bench_block.py " + " ".join(
                f"--{k.replace('_', '-')} {','.join(map(str, v)) if isinstance(v, list) else v}"
                for k, v in vars(args).items() if v is not None),
            "loadavg_before": os.getloadavg(), "cpus": os.cpu_count(), "torch": torch.__version__,
            "d_model": D_MODEL, "date": time.strftime("%Y-%m-%d %H:%M"),
            "cpu_vendor": linalg.cpu_vendor(), "cpu_linalg": args.cpu_linalg}


# ---------------------------------------------------------------- report

def markdown(res: dict) -> str:
    m = res["meta"]
    la = lambda v: " / ".join(f"{x:.1f}" for x in v)                     # noqa: E731
    out = [f"Run {m['date']}, `{m['command']}`; {m['cpus']} CPUs shared, load average (1/5/15 min) "
           f"{la(m['loadavg_before'])} before, {la(m['loadavg_after'])} after. Seconds per block of "
           f"T tokens (min of the repeats); wall = hidden + J_tt + eig + write + Dask overhead.", "",
           "| model (layer) | dtype | threads | cpu_linalg | hidden | J_tt (+Δ) | eig | write | Dask | wall "
           "| wall/eig | wall/token | J_tt minor faults/token |", "|" + "---|" * 13]
    for r in res["blocks"]:
        w = block_wall(r)
        out.append(f"| {r['model']} ({r['layer']}) | {r['dtype']} | {r['threads']} | {r.get('cpu_linalg', 'torch')} "
                   f"| {r['hidden']:.3f} "
                   f"| {r['jacobian']:.3f} | {r['eig']:.3f} | {r['write']:.4f} | {r['dask']['overhead_s']:.4f} "
                   f"| {w:.3f} | **{w / r['eig']:.2f}** | {w / r['tokens']:.3f} "
                   f"| {r['jac_minor_faults_per_token']:.0f} |")
    per_group = len(THREADS) * len(m.get("cpu_linalg", ["torch"]))
    out += ["", "Dask: the same block as a task on a 1-worker LocalCluster (1 thread; warm worker; "
            "compute.cpu_linalg auto).", "",
            "| model | dtype | cold task (load + hidden) | task wall | in-task compute | overhead "
            "| in-task minor faults | worker peak RSS GiB |", "|" + "---|" * 8]
    for r in res["blocks"][::per_group]:
        k = r["dask"]
        out.append(f"| {r['model']} | {r['dtype']} | {k['cold_task_s']:.2f} | {k['task_wall_s']:.3f} "
                   f"| {sum(k['in_task_seconds'].values()):.3f} | {k['overhead_s']:.4f} "
                   f"| {k['in_task_minor_faults']} | {k['worker_peak_rss_gib']:.2f} |")
    if res.get("gemm"):
        out += ["", f"The J_tt product (d, 2d)@(2d, d), d = {res['gemm'][0]['d']}, into a reused "
                f"(d, d), 1 thread, per library (CPU vendor {m.get('cpu_vendor', '?')}).", "",
                "| dtype | library | s | median s | GFLOP/s |", "|" + "---|" * 5]
        for r in res["gemm"]:
            out.append(f"| {r['dtype']} | {r['library']} | {r['s']:.4f} | {r['median_s']:.4f} | {r['gflops']:.0f} |")
    if res["solvers"]:
        out += ["", "Eigensolvers on the first fp32 J_tt benchmarked (Mamba when present; seconds "
                "per 1024x1024 matrix; error vs numpy fp64 of the fp32 J: max gap of sorted |ζ| or trace/d).", "",
                "| dtype | threads | solver | s/matrix | out dtype | error |", "|" + "---|" * 6]
        for r in res["solvers"]:
            out.append(f"| {r['dtype']} | {r['threads']} | {r['solver']} | {r['s_per_matrix']:.3f} "
                       f"| {r['out_dtype']} | {r['err_vs_fp64']:.1e} |")
    if res["naive"]:
        out += ["", "Naive route (autograd.functional.jacobian, vectorize=False, of the stock HF "
                "MambaBlock over h[:t+1], its (t,t) block) vs ours, Mamba-370M layer 24, fp32, 1 thread.", "",
                "| t | naive s/token | ours J_tt s/token | naive/ours J_tt | ours whole block s/token "
                "| naive/ours block | max abs diff J |", "|" + "---|" * 7]
        for r in res["naive"]:
            out.append(f"| {r['t']} | {r['naive_s_per_token']:.1f} | {r['ours_jacobian_s_per_token']:.4f} "
                       f"| {r['ratio_jacobian']:.0f}x | {r['ours_block_s_per_token']:.3f} "
                       f"| **{r['ratio_block']:.0f}x** | {r['max_abs_diff_vs_structured']:.1e} |")
    out += ["", f"Peak RSS of the benchmark process: {m['peak_rss_gib_bench_process']:.2f} GiB."]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="/tmp/tdos-bench", help="saved models and the bench store")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--name", default="bench_block", help="output file stem")
    ap.add_argument("--models", type=lambda s: s.split(","), default=None, help="subset, comma-separated")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--prefix", type=int, default=128)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--solver-matrices", type=int, default=4)
    ap.add_argument("--cpu-linalg", type=lambda s: s.split(","), default=["auto"],
                    help="compute.cpu_linalg choices to time the in-process block under, comma-separated")
    ap.add_argument("--naive", type=lambda s: [int(x) for x in s.split(",") if x], default=[31, 127])
    args = ap.parse_args()
    res = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(res, indent=1, default=float))
    (out / f"{args.name}.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
