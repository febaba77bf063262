"""The generic path at d = 1024: a block's wall time over the eigensolver's, and peak memory.

    .venv/bin/python -u benchmarks/bench_generic.py [--models qwen3-0.6b,mamba2-370m]
        [--positions 0,224,480] [--tokens 32] [--dtype float32]

Each model is random-init at its real shape (every layer, the real vocabulary) in a fresh
process with one thread, as a sweep worker runs (OMP/MKL/OPENBLAS_NUM_THREADS=1):
- qwen3-0.6b: Qwen3-0.6B's config (28 layers, d 1024, 16/8 heads of 128, MLP 3072), layer 14;
- mamba2-370m: state-spaces/mamba2-370m's (48 Mamba-2 layers, d 1024, 32 heads of 64,
  state 128), layer 24.
One block = --tokens tokens starting at each --position of a 512-token random sequence,
through what a task runs: LayerJacobians.run (the model's own decoding: the prefill of the
prefix through layers 0..l, the decode steps, the batched backward passes), then the
eigenvalues and the two norm directions (sweep.numerics.spectra). Reported per token: the block's
wall time, the eig share (the same J_tt through sweep.numerics.spectra.eigvals, one thread), their
ratio (issue 21's target: <= 3.0, aiming for 2.0), and the process's peak RSS (target <= 4
GiB). Writes benchmarks/results/bench_generic.{md,json}.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(__file__).parent / "results"
LAYER = {"qwen3-0.6b": 14, "mamba2-370m": 24}


def build(name: str, dtype):
    import torch
    import transformers as T
    from transformers import AutoModelForCausalLM

    from sweep.generic import attention

    if name == "qwen3-0.6b":
        cfg = T.Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                            num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                            head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6,
                            tie_word_embeddings=True)
    else:
        from sweep.checkpoints.mamba_ssm import mamba_ssm_to_hf_config

        cfg = mamba_ssm_to_hf_config({"d_model": 1024, "n_layer": 48, "vocab_size": 50277,
                                      "ssm_cfg": {"layer": "Mamba2"}, "pad_vocab_size_multiple": 16})
    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()
    m.requires_grad_(False)
    attention.register()
    if name == "qwen3-0.6b":
        m.set_attn_implementation(attention.NAME)
    return m


def one_model(name: str, positions, T: int, dtype_name: str) -> dict:
    """In this process (one thread): the blocks, timed."""
    import torch

    from sweep.generic.decode import LayerJacobians
    from sweep.numerics.spectra import eigvals, scale_direction, shift_direction

    torch.set_num_threads(1)
    dtype = getattr(torch, dtype_name)
    t = time.perf_counter()
    model = build(name, dtype)
    build_s = time.perf_counter() - t
    layer = LAYER[name]
    ids = torch.randint(0, model.config.vocab_size, (512,), generator=torch.Generator().manual_seed(1))
    engine = LayerJacobians(model, layer)
    engine.run(ids, 64, 65)                                 # the one-off attention probe
    d = model.config.hidden_size
    buf = torch.empty(T, d, d, dtype=dtype)
    rows = []
    for t0 in positions:
        t = time.perf_counter()
        res = engine.run(ids, t0, t0 + T, out=buf)
        t_jac = time.perf_counter()
        eig = eigvals(res.jac)
        scale_direction(res.jac, res.inputs)
        shift_direction(res.jac)
        t_end = time.perf_counter()
        e = time.perf_counter()
        eigvals(res.jac)                                    # the eig share alone, again
        eig_s = time.perf_counter() - e
        rows.append({"t0": t0, "tokens": T, "block_s": t_end - t, "jacobian_s": t_jac - t,
                     "eig_s": eig_s, "attention": res.attention,
                     "finite": bool(torch.isfinite(eig).all())})
    block = sum(r["block_s"] for r in rows) / (T * len(rows))
    eig = sum(r["eig_s"] for r in rows) / (T * len(rows))
    return {"model": name, "layer": layer, "dtype": dtype_name, "build_s": build_s,
            "blocks": rows, "block_s_per_token": block, "eig_s_per_token": eig,
            "ratio": block / eig, "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "params": sum(p.numel() for p in model.parameters())}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="qwen3-0.6b,mamba2-370m")
    p.add_argument("--positions", default="0,224,480")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--one", help=argparse.SUPPRESS)          # child process: one model
    args = p.parse_args()
    positions = [int(x) for x in args.positions.split(",")]
    if args.one:
        print(json.dumps(one_model(args.one, positions, args.tokens, args.dtype)))
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    results = []
    for name in args.models.split(","):
        load = os.getloadavg()[0]
        out = subprocess.run([sys.executable, __file__, "--one", name, "--positions", args.positions,
                              "--tokens", str(args.tokens), "--dtype", args.dtype],
                             env=env, capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        r["load_before"], r["load_after"] = load, os.getloadavg()[0]
        print(json.dumps(r), flush=True)
        results.append(r)
    write(results, args)


def write(results, args) -> None:
    import torch
    import transformers

    OUT.mkdir(exist_ok=True)
    stem = f"bench_generic{'' if args.dtype == 'float32' else '-' + args.dtype}"
    (OUT / f"{stem}.json").write_text(json.dumps({"args": vars(args), "torch": torch.__version__,
                                                   "transformers": transformers.__version__,
                                                   "results": results}, indent=1))
    lines = [f"# bench_generic ({args.dtype}, {args.tokens}-token blocks at t0 = {args.positions} "
             f"of 512, one thread; torch {torch.__version__}, transformers {transformers.__version__})",
             "", "| model | layer | block s/token | of which J_tt | eig s/token | block / eig | "
                 "peak RSS GiB | load before/after |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        jac = sum(b["jacobian_s"] for b in r["blocks"]) / sum(b["tokens"] for b in r["blocks"])
        lines.append(f"| {r['model']} ({r['params'] / 1e6:.0f}M params) | {r['layer']} | "
                     f"{r['block_s_per_token']:.3f} | {jac:.3f} | {r['eig_s_per_token']:.3f} | "
                     f"**{r['ratio']:.2f}** | {r['peak_rss_gib']:.2f} | "
                     f"{r['load_before']:.1f}/{r['load_after']:.1f} |")
    lines += ["", "Per block (seconds):", "", "| model | t0 | block | J_tt (prefill + decode + backward) | eig |",
              "|---|---|---|---|---|"]
    for r in results:
        lines += [f"| {r['model']} | {b['t0']} | {b['block_s']:.1f} | {b['jacobian_s']:.1f} | "
                  f"{b['eig_s']:.1f} |" for b in r["blocks"]]
    (OUT / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
