"""A sweep at Llama-3-8B's shapes on this machine, and the layer-local route against the
whole-model one at the deepest layer of the demo models.

Part 1 (`--part 8b`): the random bf16 checkpoint of bench_local.py (Llama-3-8B's shapes, 16 GB
in 33 safetensors shards, written tensor by tensor), swept as a user sweeps it: a config with
`dtype: float32`, layer 16, one 8-token sequence, its first `--tokens` tokens in one-token
blocks, on a LocalCluster of `--workers` worker processes (run_sweep, the code `tdos sweep`
runs). It records:

- `tdos sweep --dry-run`'s memory lines for this config, for the same config in float64 under
  `cluster.memory_limit: 1GB` (refused), and for today's whole-model route on this plan;
- the peak RSS (VmHWM) of every process of the sweep: this process (the client and the
  scheduler), each nanny and each worker, polled from /proc while the sweep runs;
- per block: bytes read from the checkpoint, seconds of J_tt and of eig at d = 4096;
- after the sweep, outside it: the stored eigenvalues of token 0 against autograd of layer
  16 alone, built here from transformers' LlamaDecoderLayer with its tensors read from the
  shards by safetensors and fed the stored h_16 (no tdos code in the oracle).

Part 2 (`--part deep`): the shipped demo checkpoints (checkpoints/tiny-*-bytes, 4 layers)
and a random Mamba-370M-shaped checkpoint (48 layers; bench_block.save_models), float64 (in
float32 the random 370M's layer 47 fails the self-check: 2.1e-3 against the bound 1e-3), the
generic engine, the deepest layer, in this process (run_task, no cluster): seconds per block
on the layer-local route (the residual task's stream amortised over the blocks, and without
it) against the whole-model route, which decodes through layers 0..l for every block.

    .venv/bin/python benchmarks/bench_scale.py [--part 8b|deep|all] [--workers 2] [--tokens 2]

Writes benchmarks/results/bench_scale.md (both parts when `all`).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

LAYER, L = 16, 8


# ---------------------------------------------------------------- part 1: Llama-3-8B shapes

class PeakRSS:
    """VmHWM of this process and all its descendants, polled until stopped."""

    def __init__(self, every: float = 0.5):
        self.peaks: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(every,), daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._poll()

    def _loop(self, every):
        while not self._stop.wait(every):
            self._poll()

    def _poll(self):
        for pid in [os.getpid(), *_descendants(os.getpid())]:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            hwm = next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmHWM")) / 2**20
            role = ("this process (client, scheduler, nannies)" if pid == os.getpid()
                    else "worker" if "spawn_main" in cmd else "multiprocessing helper")
            self.peaks[pid] = (role, max(hwm, self.peaks.get(pid, ("", 0.0))[1]))


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = []
        for task in Path(f"/proc/{p}/task").glob("*"):        # children of every thread
            try:
                kids += (task / "children").read_text().split()
            except OSError:
                continue
        out += [int(k) for k in kids]
        todo += [int(k) for k in kids]
    return out


def _dry_run(path: Path) -> list[str]:
    import contextlib
    import io

    from sweep.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["sweep", str(path), "--dry-run", "--workers", "1"])
    lines = [x for x in (out.getvalue() + err.getvalue()).splitlines()
             if "memory" in x or x.startswith("  =") or "error" in x]
    return [f"exit {code}: " + " / ".join(lines)]


def _oracle_eigenvalues(root: Path, h0: torch.Tensor, dtype=torch.float32) -> np.ndarray:
    """eig of autograd of layer LAYER's own call at position 0 on h0 (d,) in `dtype`: the
    layer from transformers' LlamaDecoderLayer, its tensors read from the shards here."""
    from safetensors import safe_open
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    config = LlamaConfig.from_pretrained(root)
    config._attn_implementation = "eager"
    index = json.loads((root / "model.safetensors.index.json").read_text())["weight_map"]
    prefix = f"model.layers.{LAYER}."
    state = {}
    for name, file in index.items():
        if name.startswith(prefix):
            with safe_open(root / file, "pt") as f:
                state[name[len(prefix):]] = f.get_tensor(name).to(dtype)
    with torch.device("meta"):
        layer = LlamaDecoderLayer(config, LAYER)
    layer.load_state_dict(state, assign=True)
    layer.eval().requires_grad_(False)
    rope = LlamaRotaryEmbedding(config).to(dtype)
    h0 = h0.to(dtype)
    pos = torch.zeros(1, 1, dtype=torch.long)
    cos_sin = rope(h0[None, None], position_ids=pos)

    def call(h):
        return layer(h.view(1, 1, -1), attention_mask=None, position_embeddings=cos_sin,
                     position_ids=pos).view(-1)

    with torch.enable_grad():
        J = torch.autograd.functional.jacobian(call, h0.clone(), vectorize=True)      # (d, d)
    return torch.linalg.eigvals(J).numpy()


def part_8b(args) -> list[str]:
    import yaml
    from bench_local import write_checkpoint
    from distributed import Client, LocalCluster
    from oracle import matched_eigvals_error

    from sweep.budget import size_sweep
    from sweep.config.load import load_config
    from sweep.plan.make import Plan, make_plan
    from sweep.run import run_sweep

    root = Path(args.dir)
    write_checkpoint(root)
    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    doc = {"model": {"path": str(root), "dtype": "float32"}, "layers": {LAYER: args.tokens},
           "inputs": {"sequences": 1, "length": L, "seed": 1}, "store": str(work / "big.zarr"),
           "compute": {"token_block": 1, "live_every": 0}}
    big = work / "big.yaml"
    big.write_text(yaml.safe_dump(doc))
    f64 = work / "big-f64.yaml"
    f64.write_text(yaml.safe_dump({**doc, "model": {"path": str(root), "dtype": "float64"},
                                   "cluster": {"memory_limit": "1GB"}}))
    lines = ["## Part 1: a sweep at Llama-3-8B's shapes", "",
             f"checkpoint: bf16, {sum(f.stat().st_size for f in root.glob('*.safetensors')) / 1e9:.1f} GB "
             f"in {len(list(root.glob('*.safetensors')))} shards; float32, layer {LAYER}, one "
             f"{L}-token sequence, its first {args.tokens} tokens in one-token blocks, "
             f"{args.workers} worker process(es), 1 thread each", "",
             "`tdos sweep big.yaml --dry-run --workers 1`:", "", *[f"    {x}" for x in _dry_run(big)], "",
             "the same in float64 with `cluster.memory_limit: 1GB`:", "", *[f"    {x}" for x in _dry_run(f64)], ""]
    plan = make_plan(load_config(big))
    m = plan.models[0]
    whole = dataclasses.replace(m, info=dataclasses.replace(m.info, not_local="today's route"))
    before = size_sweep(Plan(plan.config, (whole,)), workers=1)
    lines += ["the whole-model route on the same plan (the route of every checkpoint before "
              "layer-local workers):", "", f"    {before.refusal() or before.table()}", ""]

    t = time.perf_counter()
    with PeakRSS() as rss, LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                                        dashboard_address=":0") as cluster, Client(cluster) as client:
        result = run_sweep(plan, client=client, progress=False)
    wall = time.perf_counter() - t
    assert result.exit_code == 0, result.errors
    lines += [f"sweep: exit {result.exit_code}, {result.done}/{result.total} blocks in {wall:.0f} s", "",
              "| process | peak RSS (VmHWM) |", "|---|---|"]
    lines += [f"| {role} (pid {pid}) | {gib:.2f} GiB |" for pid, (role, gib) in sorted(rss.peaks.items())]
    blocks = [r for r in result.results if "block" in r]
    streams = [r for r in result.results if "layer_forwards" in r]
    lines += ["", "| per task | value |", "|---|---|"]
    for r in streams:
        lines.append(f"| residual task: layers 0..{LAYER - 1} over {L} tokens | "
                     f"{r['layer_forwards']} layer calls, {r['seconds']['stream']:.1f} s |")
    for r in blocks:
        s = r["seconds"]
        lines.append(f"| block (layer {r['layer']}, token {r['block']}) | read {r['read_bytes'] / 1e9:.3f} GB "
                     f"({r['layer_loads']} layer load); J_tt {s['jacobian']:.1f} s, eig {s['eig']:.1f} s, "
                     f"load + self-check {s['load']:.1f} s |")

    import zarr

    g = zarr.open_group(str(work / "big.zarr"), path=m.name, mode="r")
    h0 = torch.from_numpy(g["residual"][0, 0, 0])                                  # (d,)
    want = _oracle_eigenvalues(root, h0)
    exact = _oracle_eigenvalues(root, h0, torch.float64)
    err = matched_eigvals_error(g["eigenvalues"][0, 0, :1], want[None])
    rounding = matched_eigvals_error(want[None], exact[None])
    lines += ["", f"token 0's stored eigenvalues against autograd of layer {LAYER} alone "
              f"(transformers' LlamaDecoderLayer, its tensors read here, fed the stored h_16; "
              f"eigenvalues matched, max relative to the largest): **{err:.1e}**; the same "
              f"oracle in float32 against float64 (float32's own rounding here): {rounding:.1e}", ""]
    return lines


# ---------------------------------------------------------------- part 2: deep layers

def _route_seconds(path: Path, dtype: str, whole: bool, tokens: int, seqs: int, block: int):
    """(seconds per block of J_tt, stream seconds, blocks) at the deepest layer, one route."""
    from sweep.config.load import config_from_dict
    from sweep.plan.checkpoint import inspect_checkpoint
    from sweep.plan.make import make_plan
    from sweep.store.writer import open_store
    from sweep.tasks import BlockTask, ResidualTask, pending_tasks
    from sweep.worker.state import WorkerState
    from sweep.worker.task import run_task

    store = Path(tempfile.mkdtemp(prefix="bench-route-")) / "r.zarr"
    deepest = inspect_checkpoint(str(path), None, "model.path").n_layers - 1
    cfg = config_from_dict({"model": {"path": str(path), "dtype": dtype}, "layers": [deepest],
                            "inputs": {"sequences": seqs, "length": tokens, "seed": 0},
                            "store": str(store), "compute": {"token_block": block, "engine": "generic",
                                                              "live_every": 0}})
    plan = make_plan(cfg)
    tasks = pending_tasks(plan, open_store(plan))
    if whole:
        tasks = [dataclasses.replace(t, model=dataclasses.replace(t.model, not_local="forced"))
                 for t in tasks if not isinstance(t, ResidualTask)]
    stream = 0.0
    jac, state = [], WorkerState()          # dropped on return: the model goes with it
    for t in tasks:
        r = run_task(t, state=state)
        if isinstance(t, ResidualTask):
            stream += r["seconds"]["stream"]
        elif isinstance(t, BlockTask):
            jac.append(r["seconds"]["jacobian"] + r["seconds"]["hidden"])
    return statistics.median(jac[1:] or jac), stream, len(jac), deepest


def part_deep(args) -> list[str]:
    from bench_block import save_models

    models = {"tiny-mamba-bytes (demo)": REPO / "checkpoints" / "tiny-mamba-bytes",
              "tiny-neox-bytes (demo)": REPO / "checkpoints" / "tiny-neox-bytes"}
    work = Path(tempfile.mkdtemp(prefix="bench-deep-"))
    models["Mamba-370M shapes (random)"] = save_models(work, ["mamba-370m"])["mamba-370m"][0]
    torch.set_num_threads(1)
    lines = ["## Part 2: the deepest layer, layer-local against whole-model", "",
             f"float64, generic engine, {args.deep_seqs} sequence(s) x {args.deep_tokens} tokens in "
             f"{args.deep_block}-token blocks, one process, 1 thread; seconds of J_tt per block "
             f"(median, the first block left out: it loads and self-checks)", "",
             "| model | layer | whole model: J_tt per block | layer-local: J_tt per block | "
             "layer-local: stream (once) | ratio whole / local (stream amortised) |",
             "|---|---|---|---|---|---|"]
    for name, path in models.items():
        whole, _, n, deepest = _route_seconds(path, "float64", True, args.deep_tokens,
                                              args.deep_seqs, args.deep_block)
        local, stream, n, _ = _route_seconds(path, "float64", False, args.deep_tokens,
                                             args.deep_seqs, args.deep_block)
        lines.append(f"| {name} | {deepest} | {whole:.3f} s | {local:.3f} s | {stream:.2f} s | "
                     f"{whole / (local + stream / n):.2f} |")
    return lines + [""]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=("8b", "deep", "all"), default="all")
    ap.add_argument("--dir", default="/tmp/llama3-8b-shaped")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=2)
    ap.add_argument("--deep-tokens", type=int, default=24)
    ap.add_argument("--deep-seqs", type=int, default=1)
    ap.add_argument("--deep-block", type=int, default=8)
    args = ap.parse_args()
    lines = [f"# Scale: layer-local workers (benchmarks/bench_scale.py --part {args.part})", "",
             f"torch {torch.__version__}; {os.cpu_count()} CPUs; "
             f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB RAM", ""]
    if args.part in ("8b", "all"):
        lines += part_8b(args)
    if args.part in ("deep", "all"):
        lines += part_deep(args)
    out = REPO / "benchmarks" / "results" / (f"bench_scale-{args.part}.md" if args.part != "all" else "bench_scale.md")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
