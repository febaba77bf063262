"""Do the hand-written fast paths earn their place? Each against the generic path, d = 1024.

    .venv/bin/python -u benchmarks/bench_engines.py [--tokens 4] [--prefix 128] [--reps 2]

For each architecture with a hand-written block (sweep/blocks/), a random-init model of a
1024-wide shape (2 decoder layers; layer 1 measured; fp32; one thread) and one block of
--tokens tokens after --prefix cached ones:
- fast: the hand-written J_tt (`BlockOps.jacobians`) on the layer's input hidden states;
- generic: `sweep.generic.decode.LayerJacobians.run`, everything included (its prefill of
  the prefix through layers 0..1, the decode steps, the batched backward passes);
- eig: the eigenvalues of those J_tt (`sweep.numerics.spectra.eigvals`), the same for both.
End to end = J_tt + eig per token; the ratio generic / fast decides (>= 1.3 keeps the fast
path, issue 21). Both J_tt are compared (relative max difference). Writes
benchmarks/results/bench_engines.{md,json}.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

OUT = Path(__file__).parent / "results"


def shapes() -> dict:
    """name -> (transformers config, sweep.blocks class)."""
    import transformers as T

    att = dict(hidden_size=1024, num_hidden_layers=2, num_attention_heads=16)
    return {
        "mamba-370m-shape": (T.MambaConfig(vocab_size=50280, hidden_size=1024, num_hidden_layers=2,
                                           state_size=16, expand=2, time_step_rank=64),
                             "sweep.blocks.mamba:MambaOps"),
        "gpt2-medium-shape": (T.GPT2Config(n_embd=1024, n_layer=2, n_head=16), "sweep.blocks.gpt2:GPT2Ops"),
        "pythia-410m-shape": (T.GPTNeoXConfig(vocab_size=50304, intermediate_size=4096,
                                              rotary_pct=0.25, **att), "sweep.blocks.gpt_neox:GPTNeoXOps"),
        "llama-1024-shape": (T.LlamaConfig(vocab_size=32000, intermediate_size=2816,
                                           num_key_value_heads=16, **att), "sweep.blocks.llama:LlamaOps"),
    }


def build(cfg, dtype=torch.float32):
    from transformers import AutoModelForCausalLM

    from sweep.generic import attention

    torch.manual_seed(0)
    attention.register()
    m = AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()
    m.requires_grad_(False)
    m.set_attn_implementation(attention.NAME)
    return m


def hidden_in(model, ids, layer):
    """(n, d): the residual stream entering `layer` in transformers' own parallel forward
    (read by a hook: Mamba's output_hidden_states[0] is not its embedding)."""
    from sweep.plan.layers import decoder_layers

    got = []
    hook = decoder_layers(model)[layer].register_forward_pre_hook(
        lambda mod, args, kwargs: got.append(args[0] if args else kwargs["hidden_states"]),
        with_kwargs=True)
    try:
        with torch.no_grad():
            model(ids[None])
    finally:
        hook.remove()
    return got[0][0]


def timed(fn, reps):
    best, out = float("inf"), None
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def measure(name, cfg, ops_path, T, P, reps) -> dict:
    import importlib

    from sweep.generic.decode import LayerJacobians
    from sweep.numerics.spectra import eigvals

    model = build(cfg)
    ids = torch.randint(0, cfg.vocab_size, (P + T,), generator=torch.Generator().manual_seed(1))
    mod, cls = ops_path.split(":")
    ops = getattr(importlib.import_module(mod), cls)(model, 1)
    h = hidden_in(model, ids, 1)
    fast_s, fast = timed(lambda: ops.jacobians(h, P, P + T), reps)
    generic = LayerJacobians(model, 1)
    generic.run(ids, P, P + 1)                           # the one-off attention probe
    gen_s, res = timed(lambda: generic.run(ids, P, P + T), reps)
    eig_s, _ = timed(lambda: eigvals(res.jac), reps)
    diff = float((fast - res.jac).abs().max() / res.jac.abs().max())
    row = {"model": name, "tokens": T, "prefix": P, "fast_jac_s": fast_s / T,
           "generic_jac_s": gen_s / T, "eig_s": eig_s / T, "max_rel_diff": diff,
           "attention": res.attention}
    row["ratio_end_to_end"] = (row["generic_jac_s"] + row["eig_s"]) / (row["fast_jac_s"] + row["eig_s"])
    print(json.dumps(row), flush=True)
    return row


def write(rows, args) -> None:
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_engines.json").write_text(json.dumps({"args": vars(args), "load": os.getloadavg(),
                                                       "torch": torch.__version__, "rows": rows}, indent=1))
    lines = [f"# bench_engines (tokens {args.tokens}, prefix {args.prefix}, fp32, 1 thread, "
             f"load {os.getloadavg()[0]:.1f})", "",
             "| shape | fast J s/token | generic J s/token | eig s/token | end to end generic / fast | keep (>= 1.3) | max rel diff |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['fast_jac_s']:.3f} | {r['generic_jac_s']:.3f} | "
                     f"{r['eig_s']:.3f} | {r['ratio_end_to_end']:.2f} | "
                     f"{'yes' if r['ratio_end_to_end'] >= 1.3 else 'no'} | {r['max_rel_diff']:.1e} |")
    (OUT / "bench_engines.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=4)
    p.add_argument("--prefix", type=int, default=128)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--only", default=None, help="comma-separated shape names")
    args = p.parse_args()
    torch.set_num_threads(1)
    rows = [measure(n, c, o, args.tokens, args.prefix, args.reps) for n, (c, o) in shapes().items()
            if args.only is None or n in args.only.split(",")]
    write(rows, args)


if __name__ == "__main__":
    main()
