"""What a sweep will cost before it runs: blocks, bytes on disk, memory per worker, core-hours.

Everything here comes from the plan (sweep/plan/make.py: the config and the checkpoints'
headers; no weights are loaded), so `tdos sweep --dry-run` answers in seconds, and a real
run refuses a sweep whose store cannot fit on the disk or whose workers cannot fit in
memory before the store exists.

The time estimate is a model calibrated on measured costs, not a probe: seconds per token
of one residual block (J_tt and its eigenvalues, one thread, d_model = 1024) from
benchmarks/results (hand-written paths: bench_block_mamba-T32, Mamba-370M layer 24,
32-token blocks; bench_block_attention-v3, GPT-2-medium / Pythia-410M shapes, 8-token
blocks; the generic path: bench_generic, Qwen3-0.6B and Mamba-2-370m shapes), scaled by
(d_model / 1024)^3 because the eigensolver and the J_tt products are cubic in d_model (or, where
a path was also measured at another width, the power law through the two: `at_width`), plus
each worker's start-up and model loads (bench_block_mamba-T32's cold task), plus the walks of
`depth:` (each walked token's frame update per layer and eig + SVD per stack, measured at
d_model = 576; `_depth_seconds`). `make real`'s two sweeps check the whole model against
their measured wall time (benchmarks/bench_real.py, within 30 %). Against the
recorded `tdos sweep configs/mamba370m-paper.yaml` on the random-init 370M (2 workers,
435 s wall = 0.24 core-hours, benchmarks/README.md) it gives 0.21 core-hours. Token memory
(`memory:`) adds its cotangents times one cotangent's measured backward
(bench_memory: d_model = 1024, L = 512), linear in L and quadratic in d_model.

Memory is held against the threshold Dask acts on, not the raw limit: a worker whose
process memory passes `distributed.worker.memory.pause` x memory_limit (0.8 by default)
stops taking tasks, and one past `terminate` (0.95) is killed. tdos' tasks keep almost
nothing in Dask's managed memory (each returns a small dict), so `target` and `spill`,
which only move managed data to disk, free nothing here: the binding fraction is pause
(terminate where pause is switched off), read from the Dask config in force (`WorkerLimit`). The process
term is measured, not assumed (sweep/process.py).
"""
from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from sweep.errors import ConfigError
from sweep.format import dtypes
from sweep.plan.make import Plan
from sweep.process import ProcessTerm, process_term

GiB, MiB = 1 << 30, 1 << 20
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
# SmolLM2's 3.54 M parameters per layer, linear in them. Fitted to make real's two sweeps
# (benchmarks/results/real.md: 12 groups streamed through 17 and 30 layers; without it the
# estimate was 0.73 of the measured wall, with it within 3 % of both, in sample)
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
JAC_CHUNK = 512                     # cotangents per batched backward (sweep.generic.decode)
GRAPH_PER_TOKEN = 20                # a memory task's kept graph: activations of block_params / d
# the hand-written attention blocks (sweep/blocks/attention.py) vmap the attention part over
# a chunk of tokens whose (chunk, d, d) temporaries fill at most 16 MiB (at most 8 tokens):
# benchmarks/gguf_check.py measured 86 / 249 / 291 MiB of peak workspace for 2 / 8 / 16
# tokens at d = 576, float64 (a chunk of 6): 16-18 (chunk, d, d) arrays at once
FAST_ATTENTION_ARRAYS = 18
FAST_ATTENTION_ARCHS = ("gpt2", "gpt_neox", "llama")


@dataclass(frozen=True)
class Row:
    model: str
    dtype: str
    layer: int
    tokens: int                     # planned tokens of this layer (its layer_length)
    blocks: int                     # sequences x ceil(tokens / token_block)


@dataclass(frozen=True)
class WorkerLimit:
    """One worker's Dask memory_limit, where it comes from, and the fraction of it at which
    Dask stops the worker (the Dask config in force: pause, else terminate)."""
    bytes: int
    field: str                      # the config field that sets it, for the fix
    how: str                        # how bytes follows from that field
    fraction: float                 # of bytes, where Dask pauses (or kills) the worker
    threshold: str                  # which Dask setting gives `fraction`
    per_field: int = 1              # workers sharing the field's amount (a SLURM job's)

    @property
    def usable(self) -> int:
        return int(self.fraction * self.bytes)

    def refusal(self, need: int, parts: str) -> str | None:
        if need <= self.usable:
            return None
        raise_to = math.ceil(need / self.fraction * self.per_field)
        return (f"{self.field}: {_gib(self.bytes)} per worker ({self.how}) is below what one "
                f"worker needs: Dask stops a worker at {self.fraction:.0%} of its limit "
                f"({self.threshold}), {_gib(self.usable)}, and one holds up to {_gib(need)} "
                f"({parts}) — raise {self.field.split('.')[-1]} to at least {_gib(raise_to)}, "
                f"or sweep in float32 / with a smaller compute.token_block")

    def line(self) -> str:
        return (f"Dask's limit per worker {_gib(self.bytes)} ({self.how}); it stops a worker at "
                f"{self.fraction:.0%} of it ({self.threshold}): {_gib(self.usable)}")


@dataclass(frozen=True)
class Budget:
    """What the sweep of a Plan will cost here: its blocks, the store's bytes against the
    disk, one worker's peak memory against Dask's limit, core-hours (`size_sweep`)."""

    rows: tuple[Row, ...]
    store: str
    workers: int
    store_bytes: int                # the finished store, uncompressed (an upper bound)
    store_bytes_now: int            # already on disk (a resumed store)
    disk_free: int                  # at the store's nearest existing directory
    worker_bytes: int               # peak resident memory of one worker (an upper bound)
    worker_parts: str               # what worker_bytes is made of, for the dry run
    memory_total: int               # physical memory of this machine
    local: bool                     # workers run on this machine (their memory is checked)
    core_seconds: float             # CPU estimate, see the module docstring
    limit: WorkerLimit | None = None  # Dask's limit per worker, where this machine can tell
    process: ProcessTerm | None = None  # the measured process term inside worker_bytes
    growth: str = ""                # what the sweep adds to its existing store (sweep/store/grow.py)

    @property
    def blocks(self) -> int:
        return sum(r.blocks for r in self.rows)

    def summary(self) -> str:
        """One line: what `tdos sweep` prints when it starts."""
        mem = (f"<= {_gib(self.worker_bytes)} per worker x {self.workers}"
               + (f" of {_gib(self.memory_total)} RAM" if self.local else ""))
        return (f"budget: {self.blocks} blocks over {len(self.rows)} layer rows; store "
                f"<= {_size(self.store_bytes)} ({_size(self.disk_free)} free); {mem}; "
                f"~{self.core_seconds / 3600:.2g} core-hours")

    def table(self) -> str:
        """Blocks per model and layer, then the totals (what --dry-run prints)."""
        width = max(12, *(len(r.model) for r in self.rows))
        lines = [f"{'model':<{width}} {'dtype':<8} {'layer':>5} {'tokens':>6} {'blocks':>6}"]
        lines += [f"{r.model:<{width}} {r.dtype:<8} {r.layer:>5} {r.tokens:>6} {r.blocks:>6}"
                  for r in self.rows]
        hours = self.core_seconds / 3600
        lines += [
            f"blocks: {self.blocks}",
            *([f"store: {self.growth}"] if self.growth else []),
            f"store on disk: <= {_size(self.store_bytes)} uncompressed "
            f"({_size(self.store_bytes_now)} already there, {_size(self.disk_free)} free)",
            f"peak memory per worker: <= {_gib(self.worker_bytes)} "
            f"({self.workers} worker(s); this machine has {_gib(self.memory_total)})"
            + (f"; per worker {_gib(self.limit.bytes)} ({self.limit.field})" if self.limit else ""),
            f"  = {self.worker_parts}",
            *([f"  process: {self.process.describe()}"] if self.process else []),
            *([f"  {self.limit.line()}"] if self.limit else []),
            f"compute: ~{hours:.2g} core-hours on CPU (~{hours * 60 / self.workers:.3g} min wall "
            f"on {self.workers} worker(s)), from measured per-token costs (sweep/budget.py)",
        ]
        return "\n".join(lines)

    def refusal(self) -> str | None:
        """Why this sweep cannot run here (disk or memory), with the numbers; else None."""
        need = self.store_bytes - self.store_bytes_now
        if need > self.disk_free:
            return (f"store: the sweep needs up to {_size(need)} more on disk, {self.store} has "
                    f"{_size(self.disk_free)} free — free space, choose another --store, or sweep "
                    f"fewer layers/sequences")
        if self.limit and self.limit.refusal(self.worker_bytes, self.worker_parts):
            return self.limit.refusal(self.worker_bytes, self.worker_parts)
        if self.local and self.workers * self.worker_bytes > self.memory_total:
            return (f"compute: {self.workers} worker(s) x {_gib(self.worker_bytes)} peak exceeds this "
                    f"machine's {_gib(self.memory_total)} of memory — use fewer --workers or a "
                    f"smaller compute.token_block")
        return None


def size_sweep(plan: Plan, workers: int | None = None, scheduler: str | None = None) -> Budget:
    """The cost of `plan` on `workers` workers; `scheduler` (an existing cluster's address)
    means the workers' memory is not this machine's."""
    cfg = plan.config
    kind = cfg.cluster.kind
    n = workers or cfg.cluster.workers or (os.cpu_count() or 1)
    process = process_term()
    rows, store_bytes, work, seconds, peak, parts = [], 0, 0.0, 0.0, process.bytes, "the process"
    for m in plan.models:
        S, B = min(cfg.inputs.sequences, m.tokens.shape[0]), cfg.token_block   # a null: maybe fewer
        rows += [Row(m.name, m.spec.dtype, layer, tokens, S * math.ceil(tokens / B))
                 for layer, tokens in m.rows]
        planned = S * sum(tokens for _, tokens in m.rows)              # token spectra
        store_bytes += _store_bytes(m, planned, cfg)
        work += planned * _seconds_per_token(m) + _memory_seconds(m, cfg) + _depth_seconds(m, S)
        seconds += _layer_setup_seconds(m)
        seconds += n * _load_seconds(m.info, m.spec.dtype)
        need, what = _worker_bytes(m, cfg, process.bytes)
        if need > peak:
            peak, parts = need, what
    seconds += n * WORKER_START_S
    growth, left = _check_existing_store(plan)
    seconds += work * left                      # a grown or resumed store: what is left of it
    now = _du(Path(cfg.store))
    local = kind in ("local", "auto", "cuda") and not scheduler
    return Budget(tuple(rows), cfg.store, n, store_bytes, now, _free(Path(cfg.store)), peak,
                  parts, _memory_total(), local, seconds,
                  worker_limit(cfg.cluster, local or (kind == "slurm" and not scheduler)), process,
                  growth)


def check_fits(budget: Budget) -> None:
    """ConfigError (one line, with the numbers) when the sweep cannot fit here."""
    why = budget.refusal()
    if why:
        raise ConfigError(why)


# ---------------------------------------------------------------- pieces

def _check_existing_store(plan: Plan) -> tuple[str, float]:
    """A store made from another config is refused here too (read-only), so --dry-run says
    what the real run would; a store the config grows, what it adds (else ""), and the share
    of the config's blocks still to compute (1 without a store)."""
    import zarr

    from sweep.store.grow import Growth
    from sweep.store.writer import check_same_config, group_ready

    meta = Path(plan.store) / "zarr.json"
    if not meta.is_file():
        return "", 1.0
    attrs = json.loads(meta.read_text()).get("attributes", {})
    check_same_config(attrs, plan)
    root = zarr.open_group(str(plan.store), mode="r")
    if not any(group_ready(root, n) for n in attrs.get("models", [])):
        return "", 1.0
    growth = Growth.of(root, plan)
    left = growth.todo / max(growth.todo + growth.kept, 1)
    return (growth.describe() if growth.added or growth.hidden else ""), left


def _seconds_per_token(m) -> float:
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


def _depth_seconds(m, sequences: int) -> float:
    """The walks' frame updates and stacks (module docstring): every walked token runs one
    update per layer of the run and one eig + SVD per stack that ends inside it."""
    if not m.depth_spans:
        return 0.0
    run = len(m.rows)
    stacks = sum(run - s + 1 for s in m.depth_spans if s <= run)
    walked = sequences * m.rows[0][1]              # the run's rows share one token count
    return walked * (run + stacks) * DEPTH_SECONDS_PER_STEP * (m.info.d_model / DEPTH_D) ** 3


def _layer_setup_seconds(m) -> float:
    """Making layers 0 .. deepest swept resident, on the layer-local route (module constants)."""
    if m.info.not_local:
        return 0.0                     # the whole model's load is _load_seconds'
    deepest = max(layer for layer, _ in m.rows)
    return (deepest + 1) * LAYER_SETUP_SECONDS * m.info.block_params / LAYER_SETUP_PARAMS


def _memory_seconds(m, cfg) -> float:
    """The memory tasks' cotangents (every layer and sequence, (L / every) sampled tokens, p or
    d each) times one cotangent's backward; float64 twice float32."""
    mem = cfg.memory
    if mem is None:
        return 0.0
    L, d = cfg.inputs.length, m.info.d_model
    cotangents = len(m.rows) * cfg.inputs.sequences * -(-L // mem.every) * (mem.probes or d)
    one = MEMORY_SECONDS_PER_COTANGENT["mamba" if m.info.arch == "mamba" else "attention"]
    wider = dtypes.row(m.spec.dtype).bytes / dtypes.row("float32").bytes
    return cotangents * one * (L / MEMORY_L_REF) * (d / D_REF) ** 2 * wider


def _load_seconds(info, dtype: str) -> float:
    return LOAD_S_PER_GB * info.weight_bytes / 1e9 * (FP64_LOAD_FACTOR if dtype == "float64" else 1.0)


def _store_bytes(m, planned: int, cfg) -> int:
    """Bytes of the arrays a finished sweep writes for model `m` (chunks never written,
    beyond each layer's length, take no space)."""
    dt = dtypes.row(m.spec.dtype)
    real, info = dt.bytes, m.info
    per_token = info.d_model * dt.complex_bytes + 4 * real  # eigenvalues + scale/shift ρ, r
    channels = max((k.delta_channels for k in info.kinds if k.ssm), default=0)
    per_token += channels * real                            # Δ_t
    a_log = sum(math.prod(k.a_log_shape) for k in info.kinds if k.ssm) * real
    tokens = cfg.inputs.sequences * cfg.inputs.length * 8   # the int64 token ids
    stacks = 0
    if m.depth_spans:                 # per span and start: eig(P), its σ, gain, ρ and r along 𝟙;
        n = len(m.rows)               # per token: γ and the QR diagnostic
        starts = sum(n - s + 1 for s in m.depth_spans)
        swept = cfg.inputs.sequences * m.rows[0][1]
        stacks = swept * (starts * (info.d_model * 3 + 3) + 2 * info.d_model) * real
    memory = 0
    if cfg.memory is not None:        # m_t(k) and its standard error: (layer, seq, L, K+1) each
        memory = 2 * len(m.rows) * cfg.inputs.sequences * cfg.inputs.length * (cfg.memory.lags + 1) * real
    return planned * per_token + a_log + tokens + stacks + memory


def _worker_bytes(m, cfg, process: int) -> tuple[int, str]:
    """(peak bytes, what they are) of a worker running `m`'s tasks: the process; the weights it
    holds in the compute dtype (the whole model, or on the layer-local route
    compute.resident_layers decoder layers, the modules outside them and the embedding rows
    of a sequence); the (T, d, d) J_tt buffer and eig's workspace; the generic path's batched
    backward (JAC_CHUNK rows of the layer's activations); the residual it holds (a block's
    h_l, or a residual task's batch of sequences, two layers' worth)."""
    from sweep.tasks import residual_batch

    dt = dtypes.row(m.spec.dtype)
    real, d, B, L = dt.bytes, m.info.d_model, cfg.token_block, cfg.inputs.length
    layer = m.info.block_params * real
    jac = B * d * d * real
    eig = 4 * d * d * dt.complex_bytes                     # a complex (d, d) and LAPACK's copies
    work = JAC_CHUNK * 8 * m.info.block_params // d * real if m.engine == "generic" else 0
    if m.engine == "fast" and m.info.arch in FAST_ATTENTION_ARCHS:
        chunk = max(1, min(8, (16 << 20) // (d * d * real), B))
        work = FAST_ATTENTION_ARRAYS * chunk * d * d * real
    h = L * d * real                                       # one sequence's h_l
    if m.info.not_local:
        weights = m.info.n_params * real
        held = f"the whole model {_gib(weights)}"
        stream = 0                                         # the model's own forward, one sequence
    else:
        keep = cfg.compute.resident_layers
        # while a layer is read, a tensor is held as stored and cast: half a layer at most
        weights = keep * layer + layer // 2 + (m.info.shared_params + L * d) * real
        held = (f"{keep} layer(s) x {_gib(layer)} + reading one {_gib(layer // 2)} + shared "
                f"modules and embedding rows")
        batch = min(residual_batch(m, L), cfg.inputs.sequences)
        stream = batch * 2 * h
    made = _null_bytes(m)
    if made:
        weights += made
        held += f" + null weights made {_gib(made)}"
    drawn = _quant_bytes(m)
    if drawn:
        weights += drawn
        held += f" + one tensor drawn within its bins {_gib(drawn)}"
    block = jac + eig + work + (h if not m.info.not_local or m.engine == "fast" else 0)
    # a walk up the layers (depth) holds max(spans) − 1 partial products and the product being
    # formed, (T, d, d) each in the compute dtype, and the singular and QR frames in float64,
    # beside the block's own
    walk = (max(m.depth_spans) + 2 * 8 // real) * jac if m.depth_spans else 0
    block += walk
    # a memory task keeps the layer's whole-sequence graph (bench_memory measured up to 18
    # activations of block_params / d per token, Mamba's scan) and a gradient per cotangent
    graph = L * GRAPH_PER_TOKEN * m.info.block_params // d * real if cfg.memory is not None else 0
    memory = graph + 3 * h if graph else 0
    parts = (f"process {_gib(process)} + {held} + max(block: J_tt {_gib(jac)} + eig "
             f"{_gib(eig)}" + (f" + {'backward' if m.engine == 'generic' else 'attention workspace'} "
                               f"{_gib(work)}" if work else "")
             + (f" + stacks {_gib(walk)}" if walk else "") + f" + h_l {_gib(h)}, "
             f"residual task {_gib(stream)}" + (f", memory task {_gib(memory)}" if memory else "")
             + f") [{m.name}, {m.spec.dtype}"
             + (f"; whole model: {m.info.not_local}]" if m.info.not_local else "; layer-local]"))
    return process + weights + max(block, stream, memory), parts


def _null_bytes(m) -> int:
    """What making a null's weights adds: the cost its kind registers (sweep/checkpoints/kinds.py)
    on the route the model takes (the layer-local route, or the whole model)."""
    from sweep.checkpoints import kinds

    if m.variant is None or m.variant.role != "null":
        return 0
    return kinds.get(m.variant.kind).cost(whole=bool(m.info.not_local)).bytes(m.info)


def _quant_bytes(m) -> int:
    """What drawing an ensemble member's tensors adds: the cost its kind registers (the
    quantization ensemble: a tensor's weights, gaps, draw and result in float64)."""
    from sweep.checkpoints import kinds

    if m.variant is None or m.variant.role != "ensemble":
        return 0
    return kinds.get(m.variant.kind).cost(whole=bool(m.info.not_local)).bytes(m.info)


def worker_limit(cluster, known: bool) -> WorkerLimit | None:
    """Dask's memory_limit of one worker of `cluster` (a ClusterConfig), where the budget can
    tell (`known`: a cluster tdos builds): cluster.memory_limit; else on SLURM the job's
    memory shared by its worker processes; else distributed's "auto" share of this machine
    (its memory x threads per worker / cores). None for an existing scheduler's workers, or
    when the Dask config disables both pause and terminate."""
    import logging

    import dask
    from dask.utils import parse_bytes
    from distributed.worker_memory import parse_memory_limit

    if not known:
        return None
    limit = cluster.memory_limit
    if cluster.kind == "slurm" and limit in (None, "auto"):
        from cluster.slurm import slurm_job_kwargs

        per_job = slurm_job_kwargs(cluster)["processes"]
        field, how = "cluster.slurm.memory", f"{cluster.slurm.memory} per job / {per_job} worker(s)"
        total = int(parse_bytes(cluster.slurm.memory)) // per_job
    elif limit in (None, "auto"):
        per_job, field = 1, "cluster.memory_limit"
        how = f"auto: this machine's memory x {cluster.threads_per_worker} thread(s) / cores"
    else:
        per_job, field, how = 1, "cluster.memory_limit", f"memory_limit {limit}"
    if field == "cluster.memory_limit":     # what distributed's own workers make of it
        total = parse_memory_limit(limit or "auto", cluster.threads_per_worker,
                                   logger=logging.getLogger("tdos.budget"))
    if not total or total <= 0:              # distributed's "no limit"
        return None
    for name in ("pause", "terminate"):
        fraction = dask.config.get(f"distributed.worker.memory.{name}")
        if fraction:
            return WorkerLimit(total, field, how, float(fraction),
                               f"distributed.worker.memory.{name} = {fraction}", per_job)
    return None


def _du(p: Path) -> int:
    try:
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else 0
    except OSError:
        return 0


def _free(p: Path) -> int:
    while not p.exists():
        p = p.parent
    return shutil.disk_usage(p).free


def _memory_total() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _size(n: int) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def _gib(n: int) -> str:
    return f"{n / GiB:.3g} GiB"
