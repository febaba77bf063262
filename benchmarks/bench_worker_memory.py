"""The dry run's memory per worker against a real worker's peak, at d = 576, 1024 and 4096.

Each case is a sweep as a user runs it (run_sweep, the code `tdos sweep` runs, on a
LocalCluster of one worker process, one thread), its dry run's per-worker figure from the
same plan (`size_sweep(plan, workers=1)`, sweep/budget/memory.py), and the worker's peak RSS
(VmHWM, polled every 0.5 s; bench_scale.PeakRSS):

- d = 576: SmolLM2-135M-Instruct's Q4_1 GGUF (`make smollm2`), float64, layer 15, one
  32-token sequence of random ids, token_block 32: the hand-written LLaMA path and the
  generic path (`compute.engine: generic`);
- d = 1024: a random 2-layer LLaMA (d_ff 4096, 16 heads / 8 KV heads, vocabulary 32000,
  float32 safetensors), float64, layer 1, 32 tokens, token_block 32;
- d = 4096: a random 2-layer LLaMA of Llama-3-8B's layer shapes (d_ff 14336, 32 / 8 heads,
  bf16 safetensors, vocabulary 32000), layer 1, the first 2 of 8 tokens in one-token blocks
  (the case of issue 57), float32 and float64.

    .venv/bin/python benchmarks/bench_worker_memory.py [--cases d576-fast,...] [--work /tmp/tdos-bench]

Writes benchmarks/results/bench_worker_memory.{md,json} with the load average before and
after; `tests/test_budget_memory.py` holds the dry run of the recorded plans to the recorded
estimates. Not part of `make test`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

GGUF = REPO / "checkpoints" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
# name -> (d, d_ff, heads, kv heads, stored dtype)
RANDOM = {"llama-1024": (1024, 4096, 16, 8, "float32"), "llama8b-2L": (4096, 14336, 32, 8, "bfloat16")}
# name -> (checkpoint, compute dtype, engine, layer, tokens swept, sequence length, token_block)
CASES = {
    "d576-fast": ("smollm2", "float64", "auto", 15, 32, 32, 32),
    "d576-generic": ("smollm2", "float64", "generic", 15, 32, 32, 32),
    "d1024-fast": ("llama-1024", "float64", "auto", 1, 32, 32, 32),
    "d4096-fp32-fast": ("llama8b-2L", "float32", "auto", 1, 2, 8, 1),
    "d4096-fp64-fast": ("llama8b-2L", "float64", "auto", 1, 2, 8, 1),
}


def write_random(root: Path, name: str) -> Path:
    """A random 2-layer LLaMA of RANDOM[name]'s shapes, saved once under root/name."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    d, d_ff, heads, kv, stored = RANDOM[name]
    out = root / name
    if (out / "config.json").exists():
        return out
    cfg = LlamaConfig(vocab_size=32000, hidden_size=d, intermediate_size=d_ff, num_hidden_layers=2,
                      num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=4096,
                      bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    model = model.to(getattr(torch, stored)).to_empty(device="cpu")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim > 1:
                p.copy_(torch.randn(p.shape, generator=gen) * d**-0.5)
            else:
                p.fill_(1.0)
    model.save_pretrained(out)
    return out


def config(case: str, work: Path) -> dict:
    ckpt, dtype, engine, layer, tokens, length, block = CASES[case]
    path = GGUF if ckpt == "smollm2" else write_random(work, ckpt)
    return {"model": {"path": str(path), "dtype": dtype, "name": case},
            "inputs": {"sequences": 1, "length": length, "seed": 1},
            "layers": {layer: tokens}, "store": str(work / f"{case}.zarr"),
            "compute": {"token_block": block, "live_every": 0, "engine": engine}}


def run_case(case: str, work: Path) -> dict:
    from bench_scale import PeakRSS
    from distributed import Client, LocalCluster

    from sweep.run import run_sweep

    doc = config(case, work)
    plan, budget = dry_run(doc)
    t = time.perf_counter()
    with PeakRSS() as rss, LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                        dashboard_address=":0") as cluster, Client(cluster) as client:
        result = run_sweep(plan, client=client, progress=False)
    assert result.exit_code == 0, result.errors
    worker = max(g for role, g in rss.peaks.values() if role == "worker")
    return estimated(case, doc, plan, budget, worker, time.perf_counter() - t)


def dry_run(doc: dict):
    from sweep.budget import size_sweep
    from sweep.config.load import config_from_dict
    from sweep.plan.make import make_plan

    plan = make_plan(config_from_dict(doc))
    return plan, size_sweep(plan, workers=1)


def estimated(case: str, doc: dict, plan, budget, worker: float, wall: float) -> dict:
    m = plan.models[0]
    info = {k: getattr(m.info, k) for k in ("arch", "n_layers", "d_model", "max_length", "vocab_size",
                                             "weight_bytes", "block_params", "n_params", "shared_params")}
    row = {"case": case, "config": {k: v for k, v in doc.items() if k != "store"},
           "d": m.info.d_model, "info": info, "engine": m.engine, "rows": [list(r) for r in m.rows],
           "files": sorted(m.checkpoint.get("files", {})),
           "wall_s": wall, "process_bytes": budget.process.bytes,
           "estimate_gib": budget.worker_bytes / 2**30, "measured_gib": worker,
           "parts": budget.worker_parts}
    row["ratio"] = row["estimate_gib"] / worker
    print(json.dumps(row), flush=True)
    return row


def reestimate(row: dict, work: Path) -> dict:
    """A recorded case with today's dry run of its plan (the checkpoint written again if gone)."""
    doc = config(row["case"], work)
    plan, budget = dry_run(doc)
    new = estimated(row["case"], doc, plan, budget, row["measured_gib"], row["wall_s"])
    print(json.dumps(new), flush=True)
    return new


def render(rows: list[dict], head: str) -> str:
    lines = [head, "", "| case | d | dry run, GiB per worker | worker's peak RSS, GiB | dry run / measured |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['case']} | {r['d']} | {r['estimate_gib']:.3f} | {r['measured_gib']:.3f} | "
              f"{r['ratio']:.2f} |" for r in rows]
    lines += ["", "What each dry-run figure is made of:", ""]
    lines += [f"- {r['case']}: {r['parts']}" for r in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "tdos-bench"))
    ap.add_argument("--name", default="bench_worker_memory")
    ap.add_argument("--reestimate", action="store_true",
                    help="today's dry run of the recorded plans beside the recorded peaks (no sweep)")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    out = REPO / "benchmarks" / "results"
    if args.reestimate:
        record = json.loads((out / f"{args.name}.json").read_text())
        rows = [reestimate(r, work) for r in record["rows"]]
        load0, load1 = record["load"]
        when = f"{record['date']} (the dry-run figures recomputed {time.strftime('%Y-%m-%d')})"
    else:
        load0 = os.getloadavg()
        rows = [run_case(c, work) for c in args.cases.split(",")]
        load1 = os.getloadavg()
        when = time.strftime("%Y-%m-%d %H:%M")
    head = (f"# The dry run's memory per worker against a worker's peak\n\n`python "
            f"benchmarks/bench_worker_memory.py {' '.join(sys.argv[1:])}` on {os.cpu_count()} cores, "
            f"{when}; load average {load0[0]:.1f} before, {load1[0]:.1f} "
            f"after (memory does not depend on the load). One worker process, one thread; the "
            f"peak is VmHWM of the worker over the whole sweep (residual task and blocks).")
    (out / f"{args.name}.json").write_text(json.dumps({"argv": sys.argv[1:], "load": [load0, load1],
                                                         "date": when.split()[0],
                                                         "rows": rows}, indent=1) + "\n")
    (out / f"{args.name}.md").write_text(render(rows, head))


if __name__ == "__main__":
    main()
