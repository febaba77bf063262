"""SmolLM2-135M-Instruct's Q4_1 GGUF swept layer-local at its last layer, against transformers.

The file (`make smollm2` puts it under checkpoints/; `--gguf` names another copy) is a LLaMA of
30 layers, d = 576, in Q4_1 with a Q8_0 embedding and F32 norms. This script, in float64:

- sweeps layer 29 of one 8-token sequence of natural text, read with the GGUF's own tokenizer,
  through run_sweep (the code `tdos sweep` runs) on a LocalCluster of one worker process:
  layer-local, each layer's tensors dequantized from the file on the worker
  (sweep/checkpoints/gguf_file.py GgufCheckpoint), the residual stream in the store; twice, with
  the generic path (transformers' own layer code) and with compute.engine auto (the
  hand-written LLaMA path, whose rotary tables are float64 where transformers' are float32);
- polls the peak RSS (VmHWM) of every process of that sweep, and sets the worker's beside the
  dry run's memory figure for the same config (sweep/budget/memory.py) and beside the whole model
  dequantized (its parameters x 4 bytes in float32, x 8 in float64);
- after the sweep, outside it: transformers' own load of the whole GGUF
  (AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., dtype=float64)), the stored h_29
  against that model's input to layer 29, and the stored eigenvalues and ‖J_tt‖_F² of every
  token against the diagonal blocks of autograd of its unmodified layer 29 over the whole
  sequence (tests/oracle.py): no tdos code in the oracle.

    .venv/bin/python benchmarks/gguf_check.py [--gguf checkpoints/.../SmolLM2-135M-Instruct.Q4_1.gguf]

Prints the results as markdown (recorded in benchmarks/README.md, "GGUF").
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

LAYER, L = 29, 8
TEXT = "The capital of France is Paris. The capital of Germany is Berlin, and the capital of Italy is Rome.\n"
DEFAULT = REPO / "checkpoints" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _config(gguf: Path, work: Path, engine: str) -> dict:
    (work / "text.txt").write_text(TEXT)
    return {"model": {"path": str(gguf), "dtype": "float64", "name": "smollm2"},
            "inputs": {"sequences": 1, "length": L, "text": str(work / "text.txt")},
            "layers": [LAYER], "store": str(work / f"smol-{engine}.zarr"),
            "compute": {"token_block": L, "live_every": 0, "engine": engine}}


def sweep(gguf: Path, work: Path, engine: str):
    """(plan, wall seconds, the worker's peak RSS in GiB, the dry run's Budget, routes)."""
    from bench_scale import PeakRSS
    from distributed import Client, LocalCluster

    from sweep.budget import size_sweep
    from sweep.config.load import config_from_dict
    from sweep.plan.make import make_plan
    from sweep.run import run_sweep

    cfg = config_from_dict(_config(gguf, work, engine))
    plan = make_plan(cfg)
    budget = size_sweep(plan, workers=1)
    t = time.perf_counter()
    with PeakRSS() as rss, LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                        dashboard_address=":0") as cluster, Client(cluster) as client:
        result = run_sweep(plan, client=client, progress=False)
    wall = time.perf_counter() - t
    assert result.exit_code == 0, result.errors
    routes = {r["route"] for r in result.results if "route" in r}
    worker = max(g for role, g in rss.peaks.values() if role == "worker")
    return plan, wall, worker, budget, routes


def oracle(gguf: Path, ids: torch.Tensor):
    """(h_29 (L, d), J_tt (L, d, d)) of transformers' own whole-GGUF load, float64."""
    from oracle import sequence_jacobian
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                 dtype=torch.float64).eval()
    model.requires_grad_(False)
    h, J = sequence_jacobian(model, LAYER, ids)                  # (L, d), (L, d, L, d)
    return h, torch.stack([J[t, :, t, :] for t in range(len(ids))])


def _errors(store: Path, h: torch.Tensor, diag: torch.Tensor) -> tuple[float, float, float]:
    """(h_29, eigenvalues, ‖J_tt‖_F²) max relative errors of the store against the oracle."""
    import zarr
    from oracle import matched_eigvals_error

    from sweep.numerics.spectra import eigvals

    g = zarr.open_group(str(store), path="smollm2", mode="r")
    h_err = float(np.abs(g["residual"][0, 0] - h.numpy()).max() / np.abs(h.numpy()).max())
    eig_err = matched_eigvals_error(g["eigenvalues"][0, 0], eigvals(diag).numpy())
    fro = diag.square().sum((1, 2)).numpy()
    return h_err, eig_err, float(np.max(np.abs(g["frobenius2"][0, 0] - fro) / fro))


def main() -> None:
    import zarr

    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=str(DEFAULT))
    gguf = Path(ap.parse_args().gguf).resolve()
    work = Path(tempfile.mkdtemp(prefix="gguf-check-"))
    runs = {e: sweep(gguf, work, e) for e in ("generic", "auto")}
    plan = runs["generic"][0]
    info = plan.models[0].info
    ids = torch.from_numpy(zarr.open_group(str(work / "smol-generic.zarr"), path="smollm2",
                                           mode="r")["tokens"][0])
    t = time.perf_counter()
    h, diag = oracle(gguf, ids)
    oracle_s = time.perf_counter() - t
    err = {e: _errors(work / f"smol-{e}.zarr", h, diag) for e in runs}
    dry = {e: runs[e][3].worker_bytes / 2**30 for e in runs}
    path = {"generic": "generic path (transformers' own layer code)",
            "auto": "hand-written LLaMA path (compute.engine auto)"}
    lines = [
        f"SmolLM2-135M-Instruct Q4_1 GGUF ({gguf.stat().st_size / 1e6:.0f} MB), float64, layer "
        f"{LAYER}, one {L}-token text sequence read with the GGUF's tokenizer (ids {ids.tolist()}), "
        f"one worker, route {', '.join(sorted(runs['generic'][4]))}; transformers' whole-file "
        f"load + autograd oracle {oracle_s:.0f} s", "",
        "| stored vs transformers' own GGUF load (float64), max relative error | h_29 (8 positions) "
        "| eigenvalues of J_tt (8 tokens, matched, relative to the largest) | ‖J_tt‖_F² | sweep wall |",
        "|---|---|---|---|---|",
        *[f"| {path[e]} | {err[e][0]:.1e} | {err[e][1]:.1e} | {err[e][2]:.1e} | {runs[e][1]:.0f} s |"
          for e in runs], "",
        "| memory | GiB |", "|---|---|",
        *[f"| {path[e]}: worker peak RSS (VmHWM) / the dry run's per-worker figure | "
          f"{runs[e][2]:.3f} / {dry[e]:.3f} ({100 * (runs[e][2] / dry[e] - 1):+.0f} %) |" for e in runs],
        f"| the whole model dequantized, float32 ({info.n_params:,} parameters x 4 B) | "
        f"{info.n_params * 4 / 2**30:.3f} |",
        f"| the whole model dequantized, float64 | {info.n_params * 8 / 2**30:.3f} |",
        "", *[f"dry run, per worker, {e}: {runs[e][3].worker_parts}" for e in runs],
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
