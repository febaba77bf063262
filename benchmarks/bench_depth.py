"""What `depth:` costs: a full-depth sweep with stacks and Lyapunov exponents against the same
sweep without them, in this process (run_task, the worker's code; no cluster), one thread.

Models: the shipped demo checkpoints (checkpoints/tiny-*-bytes: 4 layers, d = 128) and two
random 4-layer checkpoints at d = 1024 (Mamba-370M's and Pythia-410M's layer shapes,
save_pretrained from transformers configs), float32, every layer. Both runs sweep the same
tokens; the ratio is the summed task seconds (J_tt, eig, the walk's matmul + QR + one eig per
completed stack, writes; loads and the residual stream included) with depth over without,
measured in one run of this script.

    .venv/bin/python benchmarks/bench_depth.py [--tokens 8] [--block 4] [--spans 2 4]

Writes benchmarks/results/bench_depth.md.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _checkpoints(root: Path) -> dict:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, MambaConfig, MambaForCausalLM

    out = {"tiny-mamba-bytes (demo, d 128)": REPO / "checkpoints" / "tiny-mamba-bytes",
           "tiny-neox-bytes (demo, d 128)": REPO / "checkpoints" / "tiny-neox-bytes"}
    shapes = {"Mamba-370M layers (random, d 1024)": (MambaForCausalLM, MambaConfig(
                  vocab_size=1024, hidden_size=1024, num_hidden_layers=4, state_size=16, expand=2,
                  conv_kernel=4, time_step_rank=64)),
              "Pythia-410M layers (random, d 1024)": (GPTNeoXForCausalLM, GPTNeoXConfig(
                  vocab_size=1024, hidden_size=1024, num_hidden_layers=4, num_attention_heads=16,
                  intermediate_size=4096, rotary_pct=0.25))}
    return {**out, **save_random(shapes, root)}


def save_random(shapes: dict, root: Path) -> dict:
    """{name: path}: a randomly initialised (seed 0) model of each {name: (class, config)},
    save_pretrained under root / the name's first word."""
    out = {}
    for name, (cls, cfg) in shapes.items():
        torch.manual_seed(0)
        out[name] = root / name.split()[0]
        cls(cfg).save_pretrained(str(out[name]))
    return out


def _sweep_seconds(path: Path, tokens: int, block: int, spans, device="cpu") -> tuple[float, dict]:
    """(summed task seconds, {phase: seconds}) of sweeping every layer of `path`."""
    from sweep.config.load import config_from_dict
    from sweep.plan.make import make_plan
    from sweep.store.writer import open_store
    from sweep.tasks import pending_tasks
    from sweep.worker.state import WorkerState
    from sweep.worker.task import run_task

    store = Path(tempfile.mkdtemp(prefix="bench-depth-")) / "r.zarr"
    doc = {"model": {"path": str(path), "dtype": "float32"}, "layers": "all",
           "inputs": {"sequences": 1, "length": tokens, "seed": 0}, "store": str(store),
           "compute": {"token_block": block, "live_every": 0, "device": device}}
    if spans:
        doc["depth"] = {"spans": list(spans)}
    plan = make_plan(config_from_dict(doc))
    phases, state = collections.Counter(), WorkerState()    # the model goes with it on return
    t = time.perf_counter()
    for task in pending_tasks(plan, open_store(plan)):
        phases.update(run_task(task, state=state)["seconds"])
    total = time.perf_counter() - t
    return total, dict(phases)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--block", type=int, default=4)
    ap.add_argument("--spans", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--device", default="cpu", help="compute.device: cpu or cuda")
    args = ap.parse_args()
    torch.set_num_threads(1)
    models = _checkpoints(Path(tempfile.mkdtemp(prefix="bench-depth-ckpt-")))
    lines = [f"# What `depth:` costs (benchmarks/bench_depth.py --tokens {args.tokens} --block "
             f"{args.block} --spans {' '.join(map(str, args.spans))})", "",
             f"torch {torch.__version__}; {os.cpu_count()} CPUs, 1 thread; device {args.device}"
             f"{' (' + torch.cuda.get_device_name() + ')' if args.device == 'cuda' else ''}; float32, every layer "
             f"(4), 1 sequence x {args.tokens} tokens in {args.block}-token blocks; seconds summed "
             f"over the tasks, in this process (run_task, no cluster)", "",
             "| model | without depth | with depth | ratio | J_tt | eig | walk (matmul, QR, "
             "stack eigs) |", "|---|---|---|---|---|---|---|"]
    for name, path in models.items():
        run = [args.tokens, args.block]
        _sweep_seconds(path, *run, None, args.device)              # warm: imports, page cache
        plain, _ = _sweep_seconds(path, *run, None, args.device)
        stacked, ph = _sweep_seconds(path, *run, args.spans, args.device)
        lines.append(f"| {name} | {plain:.2f} s | {stacked:.2f} s | {stacked / plain:.2f} | "
                     f"{ph.get('jacobian', 0):.2f} s | {ph.get('eig', 0):.2f} s | "
                     f"{ph.get('depth', 0):.2f} s |")
        print(lines[-1], flush=True)
    out = REPO / "benchmarks" / "results" / f"bench_depth{'-' + args.device if args.device != 'cpu' else ''}.md"
    out.write_text("\n".join(lines) + "\n")
    print(out)


if __name__ == "__main__":
    main()
