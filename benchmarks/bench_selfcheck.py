"""What the fallback and the self-check cost at d = 1024 (docs/models.md).

    .venv/bin/python -u benchmarks/bench_selfcheck.py [--tokens 4] [--position 224]

Random-init models of real shapes (benchmarks/bench_generic.py's `build`: Mamba-2-370m
layer 24, Qwen3-0.6B layer 14), float32, one thread, as a sweep worker runs. Per model:
- J_tt per token by the generic path with its structured Mamba-style derivatives, and (for
  Mamba-style layers) by plain autograd through transformers' own ops, the route a call tdos
  does not recognise takes: the fallback's cost as the ratio of the two, in one run;
- the worker's self-check (sweep/generic/selfcheck.py: the whole-sequence call of 4 random
  tokens, causality, J_tt of one token, the comparison) against one block of 32 tokens and
  against a layer's sweep of 2 sequences x 512 tokens, from the per-token time measured here.
Writes benchmarks/results/bench_selfcheck.{md,json}.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT)]
OUT = ROOT / "benchmarks" / "results"
BLOCK, SWEEP = 32, 2 * 512          # tokens of one block; of one layer's sweep


def per_token(engine, ids, t0: int, T: int) -> float:
    t = time.perf_counter()
    engine.run(ids, t0, t0 + T)
    return (time.perf_counter() - t) / T


def self_check(model, layer: int) -> float:
    import torch

    from sweep.generic import selfcheck
    from sweep.generic.decode import LayerJacobians

    t = time.perf_counter()
    ids = selfcheck.probe_ids(model.config.vocab_size)
    call = selfcheck.whole_sequence_call(model, layer, ids)
    assert selfcheck.later_dependence(call) == 0
    jac = LayerJacobians(model, layer).run(ids, len(ids) - 1, len(ids)).jac[0]
    err = selfcheck.diagonal_error(call, jac)
    assert err <= selfcheck.bound(torch.float32), err
    return time.perf_counter() - t


def one_model(name: str, layer: int, T: int, t0: int) -> dict:
    import torch

    from bench_generic import build
    from sweep.generic.decode import LayerJacobians

    torch.set_num_threads(1)
    model = build(name, torch.float32)
    ids = torch.randint(0, model.config.vocab_size, (t0 + T,), generator=torch.Generator().manual_seed(0))
    row = {"model": name, "layer": layer, "tokens": T, "position": t0}
    row["structured_s_per_token"] = per_token(LayerJacobians(model, layer), ids, t0, T)
    if "mamba" in name:
        row["plain_s_per_token"] = per_token(LayerJacobians(model, layer, structured=False), ids, t0, T)
        row["fallback_ratio"] = row["plain_s_per_token"] / row["structured_s_per_token"]
    row["selfcheck_s"] = self_check(model, layer)
    row["selfcheck_over_block"] = row["selfcheck_s"] / (BLOCK * row["structured_s_per_token"])
    row["selfcheck_over_layer_sweep"] = row["selfcheck_s"] / (SWEEP * row["structured_s_per_token"])
    return row


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=4)
    p.add_argument("--position", type=int, default=224)
    a = p.parse_args()
    rows = [one_model(n, l, a.tokens, a.position) for n, l in (("mamba2-370m", 24), ("qwen3-0.6b", 14))]
    lines = ["| model (layer) | J_tt s/token | plain autograd s/token | fallback cost | self-check s "
             "| / one 32-token block | / a layer's sweep (2 x 512 tokens) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        plain = f"{r['plain_s_per_token']:.2f}" if "plain_s_per_token" in r else "—"
        ratio = f"{r['fallback_ratio']:.1f}x" if "fallback_ratio" in r else "— (no Mamba op)"
        lines.append(f"| {r['model']} ({r['layer']}) | {r['structured_s_per_token']:.2f} | {plain} | {ratio} "
                     f"| {r['selfcheck_s']:.2f} | {100 * r['selfcheck_over_block']:.1f} % "
                     f"| {100 * r['selfcheck_over_layer_sweep']:.2f} % |")
    text = "\n".join(lines)
    print(text)
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_selfcheck.md").write_text(f"`benchmarks/bench_selfcheck.py --tokens {a.tokens} "
                                            f"--position {a.position}`, float32, one thread\n\n{text}\n")
    (OUT / "bench_selfcheck.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
