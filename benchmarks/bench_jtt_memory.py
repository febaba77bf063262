"""J_tt of one LLaMA block on the hand-written path: seconds and peak workspace per token,
J_tt's columns in chunks (sweep/numerics/workspace.py) against all columns at once, at the
widths of SmolLM2-135M (d 576), a 1B-class LLaMA (d 1024), Llama-3-8B (d 4096) and
Llama-3-70B (d 8192), in this process, one thread.

For each width: a one-layer random LlamaForCausalLM of that layer's shapes (no download), one
sequence of `--prefix` tokens, the J_tt of its last `--tokens` tokens:

- seconds per token of `LlamaOps.jacobians` with the default chunk and with every column at
  once (`--whole`);
- the workspace: the rise of this process's peak RSS (VmHWM, reset through
  /proc/self/clear_refs before each call) above what it held before the call, less the
  (T, d, d) output (preallocated and touched), in bytes and in units of d^2 x itemsize;
- `--check`: the chunked J_tt against the autograd reference (`jacobians_ref`, vmap(jacrev)
  of the one-token step), relative max error (and, with `--whole`, against all columns at once);
- `--jvp-columns k`: k columns of the last token's J_tt against forward-mode autograd of the
  one-token step (one tangent's memory: the check that reaches 70B's width).
- `--fit` (default): the workspace at chunks of d/8 ... d columns, fitted as a (d, d) arrays
  plus b (d,) vectors per column (sweep/budget/memory.py and sweep/numerics/workspace.py
  take a and b from here); the eigensolver's workspace of one (d, d) matrix.

    .venv/bin/python benchmarks/bench_jtt_memory.py --widths 576,1024 --check
    .venv/bin/python benchmarks/bench_jtt_memory.py --widths 8192 --tokens 1 --no-whole

Writes benchmarks/results/bench_jtt_memory.{md,json} (`--name`) with the load average before
and after. Not part of `make test`.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# width -> (d_ff, heads, kv heads): the real models' layer shapes
SHAPES = {576: (1536, 9, 3), 1024: (4096, 16, 8), 2048: (8192, 32, 8), 4096: (14336, 32, 8),
          8192: (28672, 64, 8)}


def _kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak() -> int:
    """Hand the heap's free pages back (glibc malloc_trim, so that what a call allocates shows
    in RSS rather than reusing pages an earlier call freed), reset VmHWM; VmRSS now."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    return _kib("VmRSS:")


def block(d: int, dtype):
    """(LlamaOps of layer 0 of a one-layer random LLaMA of width d, its config)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from sweep.blocks.llama import LlamaOps

    d_ff, heads, kv = SHAPES[d]
    cfg = LlamaConfig(vocab_size=256, hidden_size=d, intermediate_size=d_ff, num_hidden_layers=1,
                      num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=4096,
                      bos_token_id=0, eos_token_id=0, pad_token_id=0)
    torch.manual_seed(0)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    model = model.to(dtype).to_empty(device="cpu")       # the dtype on meta: no second copy
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02) if p.ndim > 1 else p.fill_(1.0)
    model.model.rotary_emb = type(model.model.rotary_emb)(cfg)
    return LlamaOps(model, 0), cfg


def measure(ops, h, T: int, columns: int | None) -> dict:
    """Seconds per token and the workspace above the (T, d, d) output of one jacobians call
    (after one warm-up call of the same shape: the first pays for torch's lazy set-up)."""
    L, d = h.shape
    out = h.new_zeros(T, d, d)
    kw = {} if columns is None else {"columns": columns}
    ops.jacobians(h, L - T, L, out=out, **kw)
    gc.collect()
    before = _reset_peak()
    t = time.perf_counter()
    ops.jacobians(h, L - T, L, out=out, **kw)
    seconds = time.perf_counter() - t
    work = _kib("VmHWM:") - before
    return {"seconds_per_token": seconds / T, "workspace_bytes": work,
            "workspace_d2": work / (d * d * h.element_size()), "out": out}


def eig_workspace(d: int, dtype) -> dict:
    """The rise of peak RSS of one eig of a (d, d) matrix (sweep.numerics.linalg, each
    library), in d^2 x itemsize."""
    from sweep.numerics import linalg

    m = torch.randn(d, d, generator=torch.Generator().manual_seed(3), dtype=torch.float64).to(dtype)
    row = {}
    for lib in ("torch", "openblas"):
        with linalg.using(lib):
            linalg.eigvals_cpu(m[: d // 4, : d // 4].contiguous())   # load LAPACK first
            gc.collect()
            before = _reset_peak()
            linalg.eigvals_cpu(m, {})
            row[lib] = (_kib("VmHWM:") - before) / (d * d * m.element_size())
    return row


def columns_vs_jvp(ops, h, J, k: int) -> float:
    """Relative max error of k of J_tt's columns (the last token's, spread over its chunks)
    against forward-mode autograd of the one-token step along those basis vectors: an oracle
    whose memory is one tangent, so it reaches widths where the whole-width path does not fit."""
    from torch.func import jvp

    L, d = h.shape
    pre = {key: v[-1] for key, v in ops.prefix(h, L - 1, L).items()}
    worst = 0.0
    for j in torch.linspace(0, d - 1, k).round().long().tolist():
        e = torch.zeros_like(h[-1])
        e[j] = 1
        col = jvp(lambda x: ops.step(x, pre), (h[-1],), (e,))[1]        # (d,) = J[:, j]
        worst = max(worst, _rel(J[:, j], col))
    return worst


def _rel(a, b) -> float:
    return float((a - b).abs().max() / b.abs().max())


def fit(by_columns: dict, d: int, itemsize: int) -> tuple[float, float]:
    """Least squares of workspace = a d^2 + b c d (x itemsize) over the chunk widths c: (a, b),
    the (d, d) arrays and the (d,) vectors per column."""
    import numpy as np

    c = np.array(sorted(by_columns), float)
    w = np.array([by_columns[k] for k in sorted(by_columns)], float) / itemsize
    b, a = np.polyfit(c * d, w, 1)
    return float(a / d**2), float(b)


def run_width(d: int, dtype, args) -> dict:
    from sweep.numerics.workspace import column_bytes, column_chunk

    torch.set_num_threads(1)
    ops, _ = block(d, dtype)
    gen = torch.Generator().manual_seed(1)
    h = torch.randn(args.prefix, d, generator=gen, dtype=torch.float64).to(dtype)   # (L, d)
    chunk = column_chunk(d, column_bytes(d, h.element_size()), ops.jac_workspace_bytes)
    row = {"d": d, "dtype": str(dtype).split(".")[-1], "tokens": args.tokens, "prefix": args.prefix,
           "chunk": chunk}
    chunked = measure(ops, h, args.tokens, None)
    row["chunked"] = {k: v for k, v in chunked.items() if k != "out"}
    if args.fit:       # the workspace against the chunk's width: its d^2 part and per column
        row["by_columns"] = {c: measure(ops, h, args.tokens, c)["workspace_bytes"]
                             for c in sorted({d // 8, d // 4, d // 2, d})}
        row["arrays_d2"], row["vectors_per_column"] = fit(row["by_columns"], d, h.element_size())
    row["eig_workspace_d2"] = eig_workspace(d, dtype)
    if args.whole:
        whole = measure(ops, h, args.tokens, d)
        row["whole"] = {k: v for k, v in whole.items() if k != "out"}
        row["chunked_vs_whole"] = _rel(chunked["out"], whole["out"])
        del whole
    if args.check:
        ref = ops.jacobians_ref(h, args.prefix - args.tokens, args.prefix)
        row["chunked_vs_autograd"] = _rel(chunked["out"], ref)
    if args.jvp_columns:
        row["columns_vs_jvp"] = columns_vs_jvp(ops, h, chunked["out"][-1], args.jvp_columns)
    print(json.dumps(row), flush=True)
    return row


def render(rows: list[dict], head: str) -> str:
    na = float("nan")
    lines = [head, "", "| d | dtype | chunk (columns) | s/token, chunked | s/token, whole width | "
             "workspace, chunked (MiB) | whole width (MiB) | fit: (d, d) arrays + (d,) vectors per "
             "column | eig workspace, d² arrays (torch; scipy) | chunked vs whole | chunked vs "
             "autograd | k columns vs jvp |", "|---" * 12 + "|"]
    for r in rows:
        c, w, e = r["chunked"], r.get("whole"), r["eig_workspace_d2"]
        lines.append(
            f"| {r['d']} | {r['dtype']} | {r['chunk']} | {c['seconds_per_token']:.3g} | "
            + (f"{w['seconds_per_token']:.3g}" if w else "") + f" | {c['workspace_bytes'] / 2**20:.0f} | "
            + (f"{w['workspace_bytes'] / 2**20:.0f}" if w else "") + " | "
            + (f"{r['arrays_d2']:.2f} d² + {r['vectors_per_column']:.1f} d per column" if "arrays_d2" in r
               else "") + f" | {e['torch']:.2f}; {e['openblas']:.2f} | "
            f"{r.get('chunked_vs_whole', na):.1e} | {r.get('chunked_vs_autograd', na):.1e} | "
            f"{r.get('columns_vs_jvp', na):.1e} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--widths", default="576,1024")
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--tokens", type=int, default=2)
    ap.add_argument("--prefix", type=int, default=32)
    ap.add_argument("--whole", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--jvp-columns", type=int, default=0)
    ap.add_argument("--fit", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--name", default="bench_jtt_memory")
    args = ap.parse_args()
    load0 = os.getloadavg()
    dtype = getattr(torch, args.dtype)
    rows = [run_width(int(w), dtype, args) for w in args.widths.split(",")]
    load1 = os.getloadavg()
    head = (f"# J_tt in column chunks: seconds and workspace per token\n\n`python "
            f"benchmarks/bench_jtt_memory.py {' '.join(sys.argv[1:])}` on {os.cpu_count()} cores, "
            f"{time.strftime('%Y-%m-%d %H:%M')}, one thread; load average {load0[0]:.1f} before, "
            f"{load1[0]:.1f} after (other jobs shared the machine when above ~1). A random one-layer "
            f"LLaMA of each width's real shapes; the last {args.tokens} of {args.prefix} tokens.")
    out = REPO / "benchmarks" / "results"
    (out / f"{args.name}.json").write_text(json.dumps({"argv": sys.argv[1:], "load": [load0, load1],
                                                         "rows": rows}, indent=1) + "\n")
    (out / f"{args.name}.md").write_text(render(rows, head))


if __name__ == "__main__":
    main()
