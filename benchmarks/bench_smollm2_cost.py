"""Cost at d = 576: the per-token marginal cost of one SmolLM2-135M block, against eig alone.

    .venv/bin/python -u benchmarks/bench_smollm2_cost.py [--tokens 8] [--prefix 96] [--reps 2]

A random-init LLaMA of SmolLM2-135M's shape (d = 576, MLP 1536, 9 heads / 3 KV heads,
vocabulary 49,152, tied embeddings; 2 decoder layers, layer 1 measured; one thread), and one
block of --tokens tokens after --prefix cached ones (configs/smollm2-real.yaml: blocks of 32
in sequences of 128), in float32 and float64 (the real config's compute dtype):
- fast: the hand-written LLaMA J_tt (sweep/blocks/llama.py, `LlamaOps.jacobians`), the route
  `compute.engine: auto` takes for a llama checkpoint (sweep/plan/architecture.py FAST_ARCHS);
- generic: `sweep.generic.decode.LayerJacobians.run` (`compute.engine: generic`), its prefill
  and decode steps included;
- eig: the eigenvalues of one 576 x 576 J_tt (`sweep.numerics.spectra.eigvals`), the same for both.
The weights' values do not enter the cost, so the random init stands for the GGUF's. Writes
benchmarks/results/bench_smollm2_cost.{md,json}, with the load average (a shared machine
stretches every number; the ratios are what to read).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

# one thread for every BLAS, as the Dask nanny starts a worker: torch.set_num_threads(1) does
# not reach scipy's own OpenBLAS (the eig64 route, sweep/numerics/linalg.py), whose threads
# spin against the other processes on a loaded machine (eig of one fp64 576 x 576 matrix: 17 s
# instead of about 1 s at load 20 on 2 cores)
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from bench_engines import build, hidden_in, timed  # noqa: E402

OUT = Path(__file__).parent / "results"


def smollm2_shape():
    import transformers as T

    return T.LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                         num_hidden_layers=2, num_attention_heads=9, num_key_value_heads=3,
                         tie_word_embeddings=True, rms_norm_eps=1e-5, rope_theta=100000.0)


def measure(dtype, T, P, reps) -> dict:
    from sweep.blocks.llama import LlamaOps
    from sweep.generic.decode import LayerJacobians
    from sweep.numerics.spectra import eigvals

    cfg = smollm2_shape()
    model = build(cfg, dtype)
    ids = torch.randint(0, cfg.vocab_size, (P + T,), generator=torch.Generator().manual_seed(1))
    ops = LlamaOps(model, 1)
    h = hidden_in(model, ids, 1)
    fast_s, fast = timed(lambda: ops.jacobians(h, P, P + T), reps)   # (T, d, d)
    generic = LayerJacobians(model, 1)
    generic.run(ids, P, P + 1)                           # the one-off attention probe
    gen_s, res = timed(lambda: generic.run(ids, P, P + T), reps)
    eig_s, _ = timed(lambda: eigvals(res.jac), reps)
    row = {"dtype": str(dtype).removeprefix("torch."), "tokens": T, "prefix": P,
           "fast_jac_s": fast_s / T, "generic_jac_s": gen_s / T, "eig_s": eig_s / T,
           "max_rel_diff": float((fast - res.jac).abs().max() / res.jac.abs().max())}
    row["fast_total_s"] = row["fast_jac_s"] + row["eig_s"]
    row["generic_total_s"] = row["generic_jac_s"] + row["eig_s"]
    row["ratio_end_to_end"] = row["generic_total_s"] / row["fast_total_s"]
    print(json.dumps(row), flush=True)
    return row


def write(rows, args, load0) -> None:
    OUT.mkdir(exist_ok=True)
    load1 = os.getloadavg()
    (OUT / "bench_smollm2_cost.json").write_text(json.dumps(
        {"args": vars(args), "load_before": load0, "load_after": load1, "cpus": os.cpu_count(),
         "torch": torch.__version__, "rows": rows}, indent=1) + "\n")
    lines = [f"# bench_smollm2_cost (SmolLM2-135M shape, d = 576; tokens {args.tokens} after "
             f"prefix {args.prefix}; 1 thread; load {load0[0]:.1f} before, {load1[0]:.1f} after "
             f"on {os.cpu_count()} cores)", "",
             "| dtype | fast J s/token | generic J s/token | eig s/token | fast + eig | "
             "generic + eig | generic / fast end to end | eig share (fast) | max rel diff |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['dtype']} | {r['fast_jac_s']:.4f} | {r['generic_jac_s']:.4f} | "
                     f"{r['eig_s']:.4f} | {r['fast_total_s']:.4f} | {r['generic_total_s']:.4f} | "
                     f"{r['ratio_end_to_end']:.2f} | {r['eig_s'] / r['fast_total_s']:.0%} | "
                     f"{r['max_rel_diff']:.1e} |")
    (OUT / "bench_smollm2_cost.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=8)
    p.add_argument("--prefix", type=int, default=96)
    p.add_argument("--reps", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(1)
    load0 = os.getloadavg()
    write([measure(dt, args.tokens, args.prefix, args.reps) for dt in (torch.float32, torch.float64)],
          args, load0)


if __name__ == "__main__":
    main()
