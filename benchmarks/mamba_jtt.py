"""Per-token cost of the structured Mamba J_tt vs the eigensolver, at Mamba-370M size.

    .venv/bin/python benchmarks/mamba_jtt.py [--threads 1] [--tokens 16]

Random weights with the 370M shapes (d 1024, d_inner 2048, d_state 16, dt_rank 64); no
download. The floor is one (d, d_inner) @ (d_inner, d) GEMM per token, also reported.
"""
from __future__ import annotations

import argparse
import time

import torch


def mamba_370m_shaped(dtype):
    from transformers import MambaConfig, MambaForCausalLM

    cfg = MambaConfig(vocab_size=64, hidden_size=1024, num_hidden_layers=1, state_size=16, time_step_rank=64)
    with torch.device("meta"):
        model = MambaForCausalLM(cfg)
    model = model.to_empty(device="cpu").to(dtype)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.02 if p.ndim > 1 else 0.1) + (p.ndim == 1))
        mix = model.backbone.layers[0].mixer
        mix.A_log.copy_(torch.log(torch.rand(mix.A_log.shape, generator=gen) * 15 + 0.5))
        mix.dt_proj.bias.copy_(torch.rand(mix.dt_proj.bias.shape, generator=gen) * 4 - 4.5)
    return model


def per_token(f, n):
    f()
    t = time.perf_counter()
    f()
    return (time.perf_counter() - t) / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--length", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from sweep.blocks.mamba import MambaOps

    L, T = args.length, args.tokens
    for dtype in (torch.float32, torch.float64):
        ops = MambaOps(mamba_370m_shaped(dtype), 0)
        h = torch.randn(L, 1024, dtype=dtype, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            t_jac = per_token(lambda: ops.jacobians(h, L - T, L), T)
            J = ops.jacobians(h, L - 2, L)
            t_eig = per_token(lambda: torch.linalg.eigvals(J), 2)
            out = torch.empty(1024, 1024, dtype=dtype)
            t_gemm = per_token(lambda: torch.matmul(ops.w_out, ops.folded_in_proj[0], out=out), 1)
        print(f"{str(dtype):14s} J_tt {t_jac * 1e3:7.1f} ms/token   GEMM floor {t_gemm * 1e3:7.1f} ms"
              f"   eigvals {t_eig * 1e3:7.1f} ms/token   ({args.threads} thread)")


if __name__ == "__main__":
    main()
