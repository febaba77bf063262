"""How long a sweep takes: core-seconds from measured per-token costs and per-task costs.

The time estimate is a model calibrated on measured costs, not a probe: seconds per token
of one residual block (J_tt and its eigenvalues, one thread, d_model = 1024) from
benchmarks/results (hand-written paths: bench_block_mamba-T32, Mamba-370M layer 24,
32-token blocks; bench_block_attention-v3, GPT-2-medium / Pythia-410M shapes, 8-token
blocks; the generic path: bench_generic, Qwen3-0.6B and Mamba-2-370m shapes), scaled by
(d_model / 1024)^3 because the eigensolver and the J_tt products are cubic in d_model (or, where
a path was also measured at another width, the power law through the two: `at_width`), plus
each worker's start-up and model loads (bench_block_mamba-T32's cold task), plus the walks of
`depth:` (each walked token's frame update per layer and eig + SVD per stack, measured at
d_model = 576; `depth_seconds`), plus each task's fixed cost and the client's own wall (fitted to
the quick start's and the demo's sweeps, `make real` held out: benchmarks/bench_time.py,
benchmarks/results/time.json; the docs quote that record through benchmarks/time_docs.py).
Against the
recorded `tdos sweep configs/mamba370m-paper.yaml` on the random-init 370M (2 workers,
435 s wall = 0.24 core-hours, benchmarks/README.md) it gives 0.21 core-hours. Token memory
(`memory:`) adds its cotangents times one cotangent's measured backward
(bench_memory: d_model = 1024, L = 512), linear in L and quadratic in d_model.
"""
from __future__ import annotations

import collections
import math
from dataclasses import dataclass

from sweep.budget.measured import CLIENT_SECONDS, MACHINE, MEASURED, TASK_SECONDS
from sweep.format import dtypes

D_REF = 1024                        # d_model of the measured blocks
# seconds per token of one block at d_model = 1024, one core, compute.cpu_linalg auto
SECONDS_PER_TOKEN = {
    ("mamba", "float32"): 0.395, ("mamba", "float64"): 0.926,          # bench_block_mamba-T32
    ("attention", "float32"): 0.830, ("attention", "float64"): 1.669,  # bench_block_attention-v3
    ("generic", "float32"): 1.30, ("generic", "float64"): 2.60,        # bench_generic
}
# measured at other widths: {(family, dtype): {d_model: seconds per token}}. Between two
# measured widths the cost follows the power law through them; beyond the last, (d / d)^3.
# d = 576: SmolLM2-135M's fast LLaMA path in float64 on 2 idle workers, J_tt 0.059 + eig
# 0.122 s per token (benchmarks/bench_task_costs.py on configs/smollm2-real.yaml)
SECONDS_AT_WIDTH = {
    ("attention", "float64"): {576: 0.181},
}
# a walk up the layers (`depth:`, sweep/numerics/depth.py), per walked token and d = 576: each
# layer's frame update (QR of J U, SVD, Benettin's QR) and each stack's eig and SVD cost about
# the same, 0.39 s (bench_task_costs on configs/smollm2-real.yaml: 37.5 s for 32 tokens, two
# layers and one stack; bench_depth: update and stack within 5 % of each other), on top of the
# layer's J_tt and eig above; float64 whatever the compute dtype, cubic in d_model
DEPTH_SECONDS_PER_STEP = 0.39
DEPTH_D = 576
# a layer-local group makes each decoder layer up to its deepest swept one resident, for its
# residual stream and again for its blocks (the GGUF's layer dequantized, a null's weights
# drawn or permuted, a member's moved, the stand-ins probed): 1.35 s per (group, layer) at
# SmolLM2's 3.54 M parameters per layer, linear in them. Fitted to make real's two sweeps of
# 2026-12-06 on the AMD VM (benchmarks/results/real-2026-12-06.json: 12 groups streamed through
# 17 and 30 layers; without it the estimate was 0.73 of the measured wall, with it within 3 %
# of both, in sample)
LAYER_SETUP_SECONDS = 1.35
LAYER_SETUP_PARAMS = 3_540_096
# token memory: seconds of one cotangent's backward through a layer's whole-sequence call at
# d_model = 1024 and L = 512, float32, one core (benchmarks/results/bench_memory.md; the Mamba-1
# scan on mamba.py's parallel scan); linear in L, quadratic in d_model
MEMORY_SECONDS_PER_COTANGENT = {"mamba": 0.77, "attention": 0.25}
MEMORY_L_REF = 512
WORKER_START_S = 5.0                # importing torch, transformers, distributed in a worker
LOAD_S_PER_GB = 16.7                # cold task of Mamba-370M fp32: 24.9 s for 1.49 GB of weights
FP64_LOAD_FACTOR = 1.67             # its fp64 cold task: 41.7 s
# every task's own fixed cost on a worker, whatever its size (Dask's round trip, reading the
# ledger and h_l, writing its chunks and ledger cell, the Python around them), and the client's
# own wall around the tasks (imports, the plan, starting the cluster, the store, closing):
# fitted to the quick start's and the demo's measured sweeps (benchmarks/bench_time.py), the
# one thing here no per-token benchmark measures; sweep/budget/measured.py is generated from
# that record (benchmarks/time_docs.py)


# One GPU worker: no GPU was available to this work, so its speed is an assumption, said
# wherever it is printed. torch.linalg.eigvals on CUDA runs MAGMA's hybrid geev, whose QR
# iterations stay on the host, so the eigensolver that dominates a block gains little at
# d <= 1k; J_tt's GEMMs gain more. The per-token terms (J_tt and eig, walks, cotangents) are
# taken GPU_TOKEN_SPEEDUP times faster than one core; set-up, loads and tasks as on one core.
GPU_TOKEN_SPEEDUP = 4.0
PER_TOKEN = ("J_tt and eig", "walks (depth)", "token memory")


@dataclass(frozen=True)
class TimeEstimate:
    """Core-seconds of a sweep by term, and the client's own wall around them."""

    parts: dict                     # term -> core-seconds (`sweep_seconds`)
    workers: int
    client: float = CLIENT_SECONDS  # seconds of wall on no worker

    @property
    def core_seconds(self) -> float:
        return float(sum(self.parts.values()))

    @property
    def wall_seconds(self) -> float:
        """The sweep's wall on `workers` workers with a core each: the client's own seconds and
        the core-seconds spread over the workers."""
        return self.client + self.core_seconds / self.workers

    def on_one_gpu(self, one_worker: "TimeEstimate") -> float:
        """Wall seconds on one GPU worker (GPU_TOKEN_SPEEDUP, assumed), from the estimate of the
        same plan on one worker."""
        per_token = sum(v for k, v in one_worker.parts.items() if k in PER_TOKEN)
        return one_worker.wall_seconds - per_token * (1 - 1 / GPU_TOKEN_SPEEDUP)

    def describe(self) -> str:
        """The terms, largest first, in core-minutes."""
        terms = sorted(self.parts.items(), key=lambda kv: -kv[1])
        return ", ".join(f"{name} {s / 60:.2g}" for name, s in terms if s > 0)


def sweep_seconds(plan, workers: int, left: float = 1.0) -> TimeEstimate:
    """The time model of `plan` on `workers` workers. `left`: the share of the blocks still to
    compute in an existing store (a grown or resumed one); what scales with the blocks (their
    tokens, walks, cotangents and tasks) is charged that share, the loads and set-up in full."""
    cfg = plan.config
    parts: dict = collections.Counter()
    for m in plan.models:
        S = min(cfg.inputs.sequences, m.tokens.shape[0])                   # a null: maybe fewer
        planned = S * sum(tokens for _, tokens in m.rows)                  # token spectra
        parts["J_tt and eig"] += left * planned * seconds_per_token(m)
        parts["walks (depth)"] += left * depth_seconds(m, S)
        parts["token memory"] += left * memory_seconds(m, cfg, S)
        parts["tasks' fixed costs"] += left * task_count(m, cfg, S) * TASK_SECONDS
        parts["layer set-up"] += layer_setup_seconds(m)
        parts["model loads"] += workers * load_seconds(m.info, m.spec.dtype)
    parts["worker start"] = workers * WORKER_START_S
    return TimeEstimate(dict(parts), workers)


def measured_line() -> str:
    """How the estimate fared against measured sweeps here (benchmarks/results/time.json)."""
    if not MEASURED:
        return "not yet measured against a sweep on this machine (benchmarks/bench_time.py)"
    runs = "; ".join(f"{what} {est:.3g} min estimated, {wall:.3g} min measured ({date})"
                     for what, wall, est, date in MEASURED.values())
    return f"against measured sweeps on {MACHINE}: {runs} (benchmarks/results/time.json)"


def task_count(m, cfg, sequences: int) -> int:
    """The tasks model `m` makes (sweep/tasks.py): a block task per (row, sequence, token block),
    or with depth: one walk per (sequence, token block) over every row; a residual task per
    batch of sequences; a memory task per (row, sequence); one A_log task."""
    from sweep.tasks import residual_batch

    B, L = cfg.token_block, cfg.inputs.length
    if m.depth_spans:
        blocks = sequences * math.ceil(m.rows[0][1] / B)
    else:
        blocks = sequences * sum(math.ceil(tokens / B) for _, tokens in m.rows)
    residual = math.ceil(sequences / residual_batch(m, L))
    memory = len(m.rows) * sequences if cfg.memory is not None else 0
    return blocks + residual + memory + int(any(k.ssm for k in m.info.kinds))


def seconds_per_token(m) -> float:
    """J_tt and its eigenvalues of one token of model `m`, one core (SECONDS_PER_TOKEN)."""
    if m.engine == "generic":
        family = "generic"
    else:
        family = "mamba" if m.info.arch == "mamba" else "attention"
    points = {D_REF: SECONDS_PER_TOKEN[family, m.spec.dtype],
              **SECONDS_AT_WIDTH.get((family, m.spec.dtype), {})}
    return at_width(points, m.info.d_model)


def at_width(points: dict, d: int) -> float:
    """Seconds at width d from {width: seconds} measured: the power law through the two
    measured widths around d, else the nearest one scaled by (d / width)^3."""
    widths = sorted(points)
    below = [w for w in widths if w <= d]
    above = [w for w in widths if w >= d]
    if below and above and below[-1] != above[0]:
        a, b = below[-1], above[0]
        k = math.log(points[b] / points[a]) / math.log(b / a)
        return points[a] * (d / a) ** k
    w = below[-1] if below else above[0]
    return points[w] * (d / w) ** 3


def depth_seconds(m, sequences: int) -> float:
    """The walks' frame updates and stacks (module docstring): every walked token runs one
    update per layer of the run and one eig + SVD per stack that ends inside it."""
    if not m.depth_spans:
        return 0.0
    run = len(m.rows)
    stacks = sum(run - s + 1 for s in m.depth_spans if s <= run)
    walked = sequences * m.rows[0][1]              # the run's rows share one token count
    return walked * (run + stacks) * DEPTH_SECONDS_PER_STEP * (m.info.d_model / DEPTH_D) ** 3


def layer_setup_seconds(m) -> float:
    """Making layers 0 .. deepest swept resident, on the layer-local route (module constants)."""
    if m.info.not_local:
        return 0.0                     # the whole model's load is load_seconds'
    deepest = max(layer for layer, _ in m.rows)
    return (deepest + 1) * LAYER_SETUP_SECONDS * m.info.block_params / LAYER_SETUP_PARAMS


def memory_seconds(m, cfg, sequences: int) -> float:
    """The memory tasks' cotangents (every layer and each of the model's `sequences`, (L / every)
    sampled tokens, p or d each) times one cotangent's backward; float64 twice float32."""
    mem = cfg.memory
    if mem is None:
        return 0.0
    L, d = cfg.inputs.length, m.info.d_model
    cotangents = len(m.rows) * sequences * -(-L // mem.every) * (mem.probes or d)
    one = MEMORY_SECONDS_PER_COTANGENT["mamba" if m.info.arch == "mamba" else "attention"]
    wider = dtypes.row(m.spec.dtype).bytes / dtypes.row("float32").bytes
    return cotangents * one * (L / MEMORY_L_REF) * (d / D_REF) ** 2 * wider


def load_seconds(info, dtype: str) -> float:
    """One worker's load of a model's weights (bench_block_mamba-T32's cold task)."""
    return LOAD_S_PER_GB * info.weight_bytes / 1e9 * (FP64_LOAD_FACTOR if dtype == "float64" else 1.0)
