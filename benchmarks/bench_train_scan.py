"""The Mamba training step, new against previous, side by side in one process.

    .venv/bin/python -u benchmarks/bench_train_scan.py [--reps 5] [--out benchmarks/results]

Shapes are the demo Mamba's training step (training/train_bytes.py defaults for
checkpoints/tiny-mamba-bytes): batch 16 x seq len 128 bytes, d_model 128 -> d_inner 256,
state 16, 4 layers, 1 thread. Measured, interleaved rep by rep so load drifts hit all alike:

- scan:  one selective-scan call, forward + backward, at (b, d, L, N) = (16, 256, 128, 16),
         each as its training step makes it: "previous" (and the chunked backend) through the
         reference's signature in the layouts transformers' MambaMixer passes, "new" as
         mixer_forward calls the C kernel (every operand in (b, L, .) layout, read in place);
- step:  one full training step (forward, backward, AdamW) of the 4-layer model:
         "previous" is transformers' MambaMixer with the previous scan (what trained the
         demo before this work); "new" is what training runs now (install(): the
         MambaMixer's training forward, mamba_train_scan.mixer_forward, with the conv + silu
         and the gated scan in C); the new scan inside transformers' own MambaMixer is shown
         too, with both of its backends;
- floor: the new step with the scan replaced by its gate alone (x * silu(z)): what a free
         scan would cost, i.e. the most any scan could gain per step (the dense layers,
         norms, embedding and optimizer remain).

"previous" is the training scan before this work (training/train_bytes.py at fa77dd4, kept
below verbatim as the baseline). The process runs with train_bytes.keep_freed_memory(), as
training does, for every row; one more row times the previous step in a fresh process without
it, i.e. exactly as the demo Mamba was trained before this work. The same run checks equivalence: values and gradients of every
scan input against transformers' reference scan (float64), new against previous at the
benchmark shape (float32), and the training mixer against transformers' MambaMixer (float64,
output and every parameter and input gradient). Writes <out>/bench_train_scan.{json,md}.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
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


def floor_mixer(self, hidden_states, **kwargs):
    """mixer_forward with the scan replaced by its gate (x * silu(z)): a free scan."""
    d, N = self.intermediate_size, self.ssm_state_size
    xz = self.in_proj(hidden_states)
    x = mamba_train_scan._ConvSiLU.apply(xz[..., :d], self.conv1d.weight, self.conv1d.bias)
    dt_r, B, C = torch.split(self.x_proj(x), [self.time_step_rank, N, N], dim=-1)
    dtr = F.linear(dt_r, self.dt_proj.weight)  # computed and discarded, as the scan's inputs
    y = x * F.silu(xz[..., d:]) + 0 * (dtr.sum() + B.sum() + C.sum() + self.A_log.sum() + self.D.sum())
    return self.out_proj(y)


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
    """One call with the reference's signature, laid out as transformers' MambaMixer passes
    them: x contiguous (b, d, L) (the conv's output); dt, z, B, C transposed views of the
    (b, L, .) projections they are slices of. Forward + backward into the leaves."""
    x, dt, A, B_, C_, D_, z, bias = (t.clone().requires_grad_() for t in leaves)
    args = [x, dt.transpose(1, 2), A, B_.transpose(1, 2), C_.transpose(1, 2)]
    t0 = time.perf_counter()
    y = scan(*args, D=D_, z=z.transpose(1, 2), delta_bias=bias, delta_softplus=True)
    y.sum().backward()
    return time.perf_counter() - t0


def time_training_scan(leaves) -> float:
    """The same call as mixer_forward makes it: everything in (b, L, .) layouts, z, B and C
    read in place from the projections (no copies), the gate and softplus inside."""
    x, dt, A, B_, C_, D_, z, bias = (t.clone().requires_grad_() for t in leaves)
    x_rows = x.transpose(1, 2).contiguous().detach().requires_grad_()  # mixer_forward's conv output
    t0 = time.perf_counter()
    y, _ = mamba_train_scan._FusedSSM.apply(x_rows, dt, z, A, B_, C_, D_, bias, True)
    y.sum().backward()
    return time.perf_counter() - t0


def bld_inputs(leaves):
    """scan_inputs' values with dt, z, B, C held (b, L, .) as the projections produce them."""
    x, dt, A, B_, C_, D_, z, bias = leaves
    rows = lambda t: t.transpose(1, 2).contiguous()  # noqa: E731
    return [x, rows(dt), A, rows(B_), rows(C_), D_, rows(z), bias]


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

    def timed(scan, mixer) -> float:
        modeling_mamba.mamba_selective_scan = scan
        modeling_mamba.MambaMixer.forward = mixer
        t0 = time.perf_counter()
        loss = train_bytes.lm_loss(model, train_bytes.sample_batch(data, B, L, gen))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return time.perf_counter() - t0
    return timed


AS_TRAINED = "step: previous, as trained before this work (default allocator, own process)"


def previous_as_trained() -> float:
    """One previous training step (after a warm-up one) in a fresh process that does not call
    keep_freed_memory(): the step exactly as the demo Mamba was trained before this work
    (train_bytes at fa77dd4 differs from today's only in the scan and that allocator setting)."""
    out = subprocess.run([sys.executable, __file__, "--previous-as-trained"], check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def run(reps: int) -> dict:
    from transformers.models.mamba import modeling_mamba

    reference = modeling_mamba.mamba_selective_scan
    hf_mixer = modeling_mamba.MambaMixer.forward
    scans = {"previous": previous_train_scan, "new": new_scan("fused"),
             "new, chunked torch backend": new_scan("chunked")}
    equivalence = {  # max relative error over y and all 8 input gradients
        "new scan (fused, float32) vs transformers reference (float64), (2, 8, 64, 4)":
            max_rel_err(scans["new"], reference, (2, 8, 64, 4), torch.float32, torch.float64),
        "new scan (fused, float32) vs transformers reference (float64), (3, 40, 19, 5)":
            max_rel_err(scans["new"], reference, (3, 40, 19, 5), torch.float32, torch.float64),
        "new scan (chunked, float64) vs transformers reference (float64), (2, 8, 64, 4)":
            max_rel_err(scans["new, chunked torch backend"], reference, (2, 8, 64, 4),
                        torch.float64, torch.float64),
        f"new scan (fused) vs previous, float32, {(B, D, L, N)}":
            max_rel_err(scans["new"], previous_train_scan, (B, D, L, N), torch.float32,
                        torch.float32),
        "training mixer (float32) vs transformers MambaMixer (float64), output and 10 gradients":
            mamba_train_scan.check_mixer(),
    }
    leaves = bld_inputs(scan_inputs((B, D, L, N), torch.float32))
    timed_step = step_timer()
    steps = {"previous": (previous_train_scan, hf_mixer),
             "new": (scans["new"], mamba_train_scan.mixer_forward),
             "new scan in transformers' MambaMixer": (scans["new"], hf_mixer),
             "new scan in transformers' MambaMixer, chunked torch backend":
                 (scans["new, chunked torch backend"], hf_mixer),
             "floor (new, no scan)": (scans["new"], floor_mixer)}
    times = {**{f"scan: {name}": [] for name in scans}, **{f"step: {name}": [] for name in steps},
             AS_TRAINED: []}
    try:
        for _ in range(reps + 1):  # the first round warms up and is dropped
            for name, scan in scans.items():
                times[f"scan: {name}"].append(time_training_scan(leaves) if name == "new"
                                              else time_scan(scan, leaves))
            for name, (scan, mixer) in steps.items():
                times[f"step: {name}"].append(timed_step(scan, mixer))
            times[AS_TRAINED].append(previous_as_trained())
    finally:
        modeling_mamba.mamba_selective_scan = reference
        modeling_mamba.MambaMixer.forward = hf_mixer
    median = {k: statistics.median(v[1:]) for k, v in times.items()}
    return {"equivalence_max_rel_err": equivalence, "seconds": {k: v[1:] for k, v in times.items()},
            "median_s": median,
            "ratio_previous_over_new": {kind: median[f"{kind}: previous"] / median[f"{kind}: new"]
                                        for kind in ("scan", "step")},
            "ratio_as_trained_over_new": median[AS_TRAINED] / median["step: new"],
            "ratio_previous_over_floor": median["step: previous"] / median["step: floor (new, no scan)"],
            "scan_share_of_step": {
                "previous": 1 - median["step: floor (new, no scan)"] / median["step: previous"],
                "new": 1 - median["step: floor (new, no scan)"] / median["step: new"]}}


def markdown(res: dict, meta: dict) -> str:
    rows = "\n".join(f"| {k} | {res['median_s'][k]:.3f} | {min(v):.3f} |"
                     for k, v in res["seconds"].items())
    eq = "\n".join(f"| {k} | {v:.1e} |" for k, v in res["equivalence_max_rel_err"].items())
    r = res["ratio_previous_over_new"]
    return f"""# Mamba training step and scan: previous vs new ({meta['when']})

`{meta['command']}`, torch {meta['torch']}, {meta['threads']} thread, chunked backend's chunk {meta['chunk']};
load average {meta['load_before']} before, {meta['load_after']} after (2 cores shared with other jobs).
Shapes: batch {B}, seq len {L}, d_inner {D}, state {N}; step = the 4-layer demo Mamba.
{meta['reps']} interleaved repetitions after one warm-up round.

| what (seconds) | median | min |
|---|---|---|
{rows}

Ratio previous / new (medians): scan forward + backward {r['scan']:.1f}x, training step {r['step']:.1f}x
(against the step as trained before this work, in its own process without the allocator setting:
{res['ratio_as_trained_over_new']:.1f}x).
A step with a free scan (the floor) would be {res['ratio_previous_over_floor']:.1f}x: the rest of the step
(dense projections, norms, embedding, optimizer) bounds any scan's gain per step. Scan and conv share
of the step, (step - floor) / step: previous {res['scan_share_of_step']['previous']:.0%}, new {res['scan_share_of_step']['new']:.0%}.

| equivalence (max of max abs error / max abs value, over outputs and gradients) | |
|---|---|
{eq}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--previous-as-trained", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.previous_as_trained:  # the child of previous_as_trained(): one timed step, printed
        from transformers.models.mamba import modeling_mamba

        timed = step_timer()
        timed(previous_train_scan, modeling_mamba.MambaMixer.forward)
        print(timed(previous_train_scan, modeling_mamba.MambaMixer.forward))
        return
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
