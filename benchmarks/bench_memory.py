"""What `memory:` costs: the token-memory task of one layer against the J_tt sweep of the same
layer, at d = 1024 and L = 512 (Mamba-370M's and Qwen3-0.6B's layer shapes: random
2-layer checkpoints saved from transformers configs), float32, layer 1, one thread, in this
process (the worker's code, no cluster).

- J_tt: a sweep of layer 1 over its first `--jtt-tokens` tokens (`layers: {1: n}`), the
  block tasks' J_tt + eig + write seconds per token, times L for the whole layer (the
  fast Mamba path's cost does not depend on the position; the generic path's attention over
  at most 512 cached keys is small beside its d×d work, so early tokens slightly under-count
  it).
- memory: the layer's whole-sequence forward once (its graph kept), then one backward over
  all L tokens per cotangent: `--rows` of them timed, times the (L / every) · p cotangents of
  the settings (every one costs the same: the full-length backward). Defaults p = 8,
  K = 64, every = 8: 512 cotangents; exact (p = 0): 64 · d of them. One cotangent's
  backward is also timed at L/4 and L/2, which shows how it grows with L.
- `--batched`: the same cotangents in one `is_grads_batched` backward, per cotangent, against
  one at a time (sweep/numerics/memory.py goes one at a time on the CPU).

    .venv/bin/python benchmarks/bench_memory.py [--length 512] [--rows 2] [--jtt-tokens 32] [--batched]

Writes benchmarks/results/bench_memory.md.
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
    from bench_depth import save_random
    from transformers import MambaConfig, MambaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    shapes = {"Mamba-370M layer (random, d 1024)": (MambaForCausalLM, MambaConfig(
                  vocab_size=1024, hidden_size=1024, num_hidden_layers=2, state_size=16, expand=2,
                  conv_kernel=4, time_step_rank=64)),
              "Qwen3-0.6B layer (random, d 1024)": (Qwen3ForCausalLM, Qwen3Config(
                  vocab_size=1024, hidden_size=1024, intermediate_size=3072, num_hidden_layers=2,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128))}
    return save_random(shapes, root)


def _jtt_seconds_per_token(path: Path, length: int, tokens: int) -> float:
    """J_tt + eig + write seconds per token of layer 1 (block tasks only)."""
    from sweep.config.load import config_from_dict
    from sweep.plan.make import make_plan
    from sweep.store.writer import open_store
    from sweep.tasks import BlockTask, pending_tasks
    from sweep.worker.state import WorkerState
    from sweep.worker.task import run_task

    store = Path(tempfile.mkdtemp(prefix="bench-memory-")) / "r.zarr"
    doc = {"model": {"path": str(path), "dtype": "float32"}, "layers": {1: tokens},
           "inputs": {"sequences": 1, "length": length, "seed": 0}, "store": str(store),
           "compute": {"token_block": 16, "live_every": 0}}
    plan = make_plan(config_from_dict(doc))
    phases, state = collections.Counter(), WorkerState()    # the model goes with it on return
    for task in pending_tasks(plan, open_store(plan)):
        seconds = run_task(task, state=state)["seconds"]
        if isinstance(task, BlockTask):
            phases.update({k: v for k, v in seconds.items() if k in ("jacobian", "eig", "write")})
    return sum(phases.values()) / tokens


def _memory_seconds(path: Path, length: int, rows: int, batched: bool) -> dict:
    """Seconds of the forward with its graph, and per cotangent one at a time (and batched)."""
    from transformers import AutoModelForCausalLM

    from sweep.generic.selfcheck import whole_sequence_call
    from sweep.numerics.memory import _graph

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = torch.randint(0, model.config.vocab_size, (length,), generator=torch.Generator().manual_seed(0))
    call = whole_sequence_call(model, 1, ids)
    d = call.x.shape[-1]
    t = time.perf_counter()
    x, y, saved = _graph(call)
    forward = time.perf_counter() - t
    gen = torch.Generator().manual_seed(0)
    w = torch.zeros(rows, 1, length, d)
    w[:, 0, -1] = torch.randint(0, 2, (rows, d), generator=gen).float() * 2 - 1
    t = time.perf_counter()
    for r in range(rows):
        torch.autograd.grad(y, x, w[r], retain_graph=True)
    one = (time.perf_counter() - t) / rows
    many = float("nan")
    if batched:
        t = time.perf_counter()
        torch.autograd.grad(y, x, w, retain_graph=True, is_grads_batched=True)
        many = (time.perf_counter() - t) / rows
    return {"forward": forward, "one": one, "batched": many, "saved": saved, "d": d}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--rows", type=int, default=2, help="cotangents timed")
    ap.add_argument("--batched", action="store_true", help="also time them batched")
    ap.add_argument("--jtt-tokens", type=int, default=32, help="tokens of the timed J_tt sweep")
    ap.add_argument("--lags", type=int, default=64)
    ap.add_argument("--probes", type=int, default=8)
    ap.add_argument("--every", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    L = args.length
    sampled = len(range(0, L, args.every))
    lines = [f"# What `memory:` costs (benchmarks/bench_memory.py --length {L} --rows {args.rows} "
             f"--jtt-tokens {args.jtt_tokens})", "",
             f"torch {torch.__version__}; {os.cpu_count()} CPUs, 1 thread; float32; layer 1 of a "
             f"random 2-layer checkpoint; L = {L}; settings lags {args.lags}, probes {args.probes}, "
             f"every {args.every} ({sampled} sampled tokens). The J_tt sweep of the layer is its "
             f"per-token cost over the first {args.jtt_tokens} tokens times L; the memory task is "
             f"one forward plus {args.rows} timed cotangents scaled to the settings' count "
             f"(each is one backward over all L tokens).", "",
             "| model | J_tt sweep of the layer | memory, defaults | ratio | memory, exact | ratio | "
             f"one cotangent at L = {L // 4} / {L // 2} / {L}" + (" (batched at L)" if args.batched else "")
             + " | graph kept at L |", "|---|---|---|---|---|---|---|---|"]
    for name, path in _checkpoints(Path(tempfile.mkdtemp(prefix="bench-memory-ckpt-"))).items():
        jtt = _jtt_seconds_per_token(path, L, args.jtt_tokens) * L
        short = [_memory_seconds(path, n, args.rows, False)["one"] for n in (L // 4, L // 2)]
        m = _memory_seconds(path, L, args.rows, args.batched)
        default = m["forward"] + sampled * args.probes * m["one"]
        exact = m["forward"] + sampled * m["d"] * m["one"]
        lines.append(f"| {name} | {jtt:.0f} s | {default:.0f} s | {default / jtt:.2f} | "
                     f"{exact:.0f} s | {exact / jtt:.1f} | "
                     + " / ".join(f"{v:.2f} s" for v in (*short, m["one"]))
                     + (f" ({m['batched']:.2f} s)" if args.batched else "")
                     + f" | {m['saved'] / 2 ** 20:.0f} MiB |")
        print(lines[-1], flush=True)
    out = REPO / "benchmarks" / "results" / "bench_memory.md"
    out.write_text("\n".join(lines) + "\n")
    print(out)


if __name__ == "__main__":
    main()
