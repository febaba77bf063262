"""The Mamba training scan, new against previous, side by side in one process.

    .venv/bin/python -u benchmarks/bench_train_scan.py [--reps 5] [--out benchmarks/results]

Shapes are the demo Mamba's training step (training/train_bytes.py defaults for
checkpoints/tiny-mamba-bytes): batch 16 x seq len 128 bytes, d_model 128 -> d_inner 256,
state 16, 4 layers, 1 thread. Measured, interleaved rep by rep so load drifts hit all alike:

- scan:  one selective-scan call, forward + backward, at (b, d, L, N) = (16, 256, 128, 16);
- step:  one full training step (forward, backward, AdamW) of the 4-layer model;
- floor: the same step with the scan replaced by its gate alone (x * silu(z)): what a free
  scan would cost, i.e. the most any scan can gain per step.

"previous" is the training scan before this change (training/train_bytes.py at fa77dd4,
kept below verbatim as the baseline); "new" is training/mamba_train_scan.py with its fused C
kernel (what training uses), beside its chunked torch backend (the fallback without a C
compiler). The process runs with
train_bytes.keep_freed_memory(), as training does. The same run checks equivalence: values
and gradients of every scan input against transformers' reference scan (float64) and new
against previous at the benchmark shape (float32). Writes <out>/bench_train_scan.{json,md}.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "training"))
import mamba_train_scan  # noqa: E402
import train_bytes  # noqa: E402

B, D, L, N = 16, 256, 128, 16  # batch, d_inner, seq len, state


def previous_train_scan(hidden_states, dt, A, B, C, D=None, z=None, delta_bias=None,
                        delta_softplus=False, return_last_state=False, **kwargs):
    """The training scan before this change (train_bytes.selective_scan_train at fa77dd4)."""
    if delta_bias is not None:
        dt = dt + delta_bias[..., None]
    if delta_softplus:
        dt = F.softplus(dt)
    decay = torch.exp(A[None, :, None, :] * dt[..., None])  # (b, d, L, N)
    drive = (dt * hidden_states)[..., None] * B.transpose(1, 2)[:, None]  # (b, d, L, N)
    state, states = torch.zeros_like(decay[:, :, 0]), []  # (b, d, N)
    for a_t, u_t in zip(decay.unbind(2), drive.unbind(2)):
        state = a_t * state + u_t
        states.append(state)
    y = torch.einsum("bdln,bnl->bdl", torch.stack(states, 2), C)  # (b, d, L)
    if D is not None:
        y = y + hidden_states * D[None, :, None]
    if z is not None:
        y = y * F.silu(z)
    return (y, state) if return_last_state else y


def gate_only(hidden_states, dt, A, B, C, D=None, z=None, **kwargs):
    """No scan at all: the floor of a training step."""
    return hidden_states * F.silu(z)


def new_scan(backend: str):
    return functools.partial(mamba_train_scan.selective_scan_fast, backend=backend)


def scan_inputs(shape, dtype, seed=0):
    """Leaves of one scan call: x, dt, A, B, C, D, z, delta_bias (the MambaMixer's layouts)."""
    b, d, l, n = shape
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen).to(dtype)  # float32 draws: exact in float64 too
    return [r(b, d, l), r(b, d, l) - 2, -torch.exp(r(d, n)), r(b, n, l), r(b, n, l), r(d),
            r(b, d, l), r(d)]


def value_and_grads(scan, leaves, weight):
    ts = [t.clone().requires_grad_() for t in leaves]
    y = scan(*ts[:5], D=ts[5], z=ts[6], delta_bias=ts[7], delta_softplus=True)
    return [y, *torch.autograd.grad((y * weight).sum(), ts)]


def max_rel_err(scan, oracle, shape, dtype, oracle_dtype) -> float:
    """max over y and the 8 gradients of max|new - oracle| / max|oracle|."""
    leaves = scan_inputs(shape, dtype)
    weight = torch.randn(shape[:3], generator=torch.Generator().manual_seed(1))
    new = value_and_grads(scan, leaves, weight.to(dtype))
    ref = value_and_grads(oracle, [t.to(oracle_dtype) for t in leaves], weight.to(oracle_dtype))
    return max(float((a.detach().double() - b.detach().double()).abs().max() / b.detach().abs().max())
               for a, b in zip(new, ref))


def time_scan(scan, leaves) -> float:
    ts = [t.clone().requires_grad_() for t in leaves]
    t0 = time.perf_counter()
    y = scan(*ts[:5], D=ts[5], z=ts[6], delta_bias=ts[7], delta_softplus=True)
    y.sum().backward()
    return time.perf_counter() - t0


def step_timer():
    """One training step of the demo Mamba on random bytes, under whichever scan is installed."""
    from transformers.models.mamba import modeling_mamba

    cfg = train_bytes.TrainConfig(arch="mamba", d_model=128, batch=B, seq_len=L, steps=300,
                                  warmup=20)
    torch.manual_seed(0)
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_config(train_bytes.build_config(cfg), dtype=torch.float32)
    opt = train_bytes.make_optimizer(model, cfg)
    data = torch.randint(1, 256, (1 << 16,), dtype=torch.uint8)
    gen = torch.Generator().manual_seed(0)

    def timed(scan) -> float:
        modeling_mamba.mamba_selective_scan = scan
        t0 = time.perf_counter()
        loss = train_bytes.lm_loss(model, train_bytes.sample_batch(data, B, L, gen))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return time.perf_counter() - t0
    return timed


def run(reps: int) -> dict:
    from transformers.models.mamba import modeling_mamba

    reference = modeling_mamba.mamba_selective_scan
    scans = {"previous": previous_train_scan, "new": new_scan("fused"),
             "new, chunked torch backend": new_scan("chunked")}
    equivalence = {  # max relative error over y and all 8 input gradients
        "new (fused, float32) vs transformers reference (float64), (2, 8, 64, 4)":
            max_rel_err(scans["new"], reference, (2, 8, 64, 4), torch.float32, torch.float64),
        "new (chunked, float64) vs transformers reference (float64), (2, 8, 64, 4)":
            max_rel_err(scans["new, chunked torch backend"], reference, (2, 8, 64, 4),
                        torch.float64, torch.float64),
        f"new (fused) vs previous, float32, {(B, D, L, N)}":
            max_rel_err(scans["new"], previous_train_scan, (B, D, L, N), torch.float32,
                        torch.float32),
    }
    leaves = scan_inputs((B, D, L, N), torch.float32)
    timed_step = step_timer()
    times = {f"{kind}: {name}": [] for kind in ("scan", "step") for name in scans}
    times["step: floor (no scan)"] = []
    for _ in range(reps + 1):  # the first round warms up and is dropped
        for name, scan in scans.items():
            times[f"scan: {name}"].append(time_scan(scan, leaves))
            times[f"step: {name}"].append(timed_step(scan))
        times["step: floor (no scan)"].append(timed_step(gate_only))
    modeling_mamba.mamba_selective_scan = reference
    median = {k: statistics.median(v[1:]) for k, v in times.items()}
    return {"equivalence_max_rel_err": equivalence, "seconds": {k: v[1:] for k, v in times.items()},
            "median_s": median,
            "ratio_previous_over_new": {kind: median[f"{kind}: previous"] / median[f"{kind}: new"]
                                        for kind in ("scan", "step")}}


def markdown(res: dict, meta: dict) -> str:
    rows = "\n".join(f"| {k} | {res['median_s'][k]:.3f} | {min(v):.3f} |"
                     for k, v in res["seconds"].items())
    eq = "\n".join(f"| {k} | {v:.1e} |" for k, v in res["equivalence_max_rel_err"].items())
    r = res["ratio_previous_over_new"]
    return f"""# Mamba training scan: previous vs new ({meta['when']})

`{meta['command']}`, torch {meta['torch']}, {meta['threads']} thread, chunked backend's chunk {meta['chunk']};
load average {meta['load_before']} before, {meta['load_after']} after (2 cores shared with other jobs).
Shapes: batch {B}, seq len {L}, d_inner {D}, state {N}; step = the 4-layer demo Mamba.
{meta['reps']} interleaved repetitions after one warm-up round.

| what (seconds) | median | min |
|---|---|---|
{rows}

Ratio previous / new (medians): scan forward + backward {r['scan']:.1f}x, training step {r['step']:.1f}x
(a step with no scan at all would be {res['median_s']['step: previous'] / res['median_s']['step: floor (no scan)']:.1f}x).

| equivalence (max over y and 8 gradients of max abs error / max abs value) | |
|---|---|
{eq}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    train_bytes.keep_freed_memory()
    meta = {"command": "python " + " ".join(sys.argv), "torch": torch.__version__, "threads": 1,
            "chunk": mamba_train_scan.CHUNK, "reps": args.reps,
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_before": " ".join(f"{x:.1f}" for x in os.getloadavg())}
    res = run(args.reps)
    meta["load_after"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    out = Path(args.out)
    (out / "bench_train_scan.json").write_text(json.dumps({"meta": meta, **res}, indent=1))
    (out / "bench_train_scan.md").write_text(markdown(res, meta))
    print(markdown(res, meta))


if __name__ == "__main__":
    main()
