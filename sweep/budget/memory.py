"""How much memory one worker holds at its peak, from the plan: the process, the weights it
keeps, and the largest of the phases that follow each other in it (reading a layer, a block's
J_tt, its eigenvalues, a residual task, a memory task).

What a block holds follows what it really allocates: J_tt of the tokens the block has (a
layer's rows may be shorter than compute.token_block), J_tt's workspace and the eigensolver's
as measured (benchmarks/bench_jtt_memory.py) at two widths, and never both at once: the
workspace is freed before eig starts. benchmarks/bench_worker_memory.py holds the total
against the measured peak RSS of a real worker at d = 576, 1024 and 4096. The process term
is measured once per environment (sweep/process.py).
"""
from __future__ import annotations

import math

from sweep.format import dtypes
from sweep.numerics.workspace import column_bytes, column_chunk

GiB, MiB = 1 << 30, 1 << 20
JAC_CHUNK = 512                     # cotangents per batched backward (sweep.generic.decode)
GRAPH_PER_TOKEN = 20                # a memory task's kept graph: activations of block_params / d
# the hand-written attention blocks' J_tt workspace per token (sweep/blocks/attention.py):
# (d, d) arrays, and (d,) vectors per column of the chunk it forms at once, measured as the
# peak RSS one call adds against the chunk's width (benchmarks/results/bench_jtt_memory.md,
# float64, random LLaMA layers of SmolLM2's and a 1B model's shapes); between the two widths
# by log-linear interpolation, beyond them the nearer one
FAST_ATTENTION_WORKSPACE = {576: (3.7, 14.9), 1024: (3.1, 19.0)}
FAST_ATTENTION_ARCHS = ("gpt2", "gpt_neox", "llama")
# LAPACK geev of one (d, d) matrix, eigenvalues only (sweep/numerics/linalg.py): the matrix's
# column-major copy and its work arrays, in d^2 x itemsize (bench_jtt_memory: 1.04-1.33 at
# d = 576 and 1024, torch's and scipy's; the old term, 4 complex (d, d), was 6x that)
EIG_ARRAYS = 1.35


def worker_bytes(m, cfg, process: int) -> tuple[int, str]:
    """(peak bytes, what they are) of a worker running `m`'s tasks: the process; the weights it
    holds in the compute dtype (the whole model, or on the layer-local route
    compute.resident_layers decoder layers, the modules outside them and the embedding rows
    of a sequence; a null's or a member's weights while they are made); then the largest
    phase: reading a layer, a block (module docstring), a residual task's batch of sequences
    (two layers' worth of h), a memory task's graph."""
    real, d, L = dtypes.row(m.spec.dtype).bytes, m.info.d_model, cfg.inputs.length
    weights, held = _weights(m, cfg, real)
    layer = m.info.block_params * real
    reading = 0 if m.info.not_local else layer // 2   # a tensor as stored and cast: half a layer at most
    block, block_parts = _block(m, cfg, real)
    h = L * d * real                                       # one sequence's h_l
    if m.info.not_local:
        stream = 0                                         # the model's own forward, one sequence
    else:
        from sweep.tasks import residual_batch

        stream = min(residual_batch(m, L), cfg.inputs.sequences) * 2 * h
    # a memory task keeps the layer's whole-sequence graph (bench_memory measured up to 18
    # activations of block_params / d per token, Mamba's scan) and a gradient per cotangent
    graph = L * GRAPH_PER_TOKEN * m.info.block_params // d * real if cfg.memory is not None else 0
    memory = graph + 3 * h if graph else 0
    parts = (f"process {gib(process)} + {held} + max(reading a layer {gib(reading)}, block: "
             f"{block_parts}, residual task {gib(stream)}"
             + (f", memory task {gib(memory)}" if memory else "") + f") [{m.name}, {m.spec.dtype}"
             + (f"; whole model: {m.info.not_local}]" if m.info.not_local else "; layer-local]"))
    return process + weights + max(reading, block, stream, memory), parts


def _weights(m, cfg, real: int) -> tuple[int, str]:
    """(bytes, what) of the weights a worker keeps in the compute dtype."""
    L, d = cfg.inputs.length, m.info.d_model
    if m.info.not_local:
        weights = m.info.n_params * real
        held = f"the whole model {gib(weights)}"
    else:
        keep, layer = cfg.compute.resident_layers, m.info.block_params * real
        weights = keep * layer + (m.info.shared_params + L * d) * real
        held = f"{keep} layer(s) x {gib(layer)} + shared modules and embedding rows"
    made = variant_bytes(m)
    if made:
        weights += made
        held += (f" + null weights made {gib(made)}" if m.variant.role == "null"
                 else f" + one tensor drawn within its bins {gib(made)}")
    return weights, held


def _block(m, cfg, real: int) -> tuple[int, str]:
    """(bytes, what) a block task holds beside the weights: J_tt of its tokens, then the larger
    of J_tt's workspace (while J_tt is formed) and eig's (after), the block's h_l, and a walk's
    products (depth)."""
    d = m.info.d_model
    T = max(min(cfg.token_block, tokens) for _, tokens in m.rows)      # the tokens a block has
    jac = T * d * d * real
    eig = int(EIG_ARRAYS * d * d * real)
    work, what = jac_workspace(m, real), ("backward" if m.engine == "generic" else "J_tt workspace")
    h = cfg.inputs.length * d * real if not m.info.not_local or m.engine == "fast" else 0
    # a walk up the layers (depth) holds max(spans) − 1 partial products and the product being
    # formed, (T, d, d) each in the compute dtype, and the singular and QR frames in float64
    walk = (max(m.depth_spans) + 2 * 8 // real) * jac if m.depth_spans else 0
    parts = (f"J_tt of {T} token(s) {gib(jac)} + max({what} {gib(work)}, eig {gib(eig)})"
             + (f" + stacks {gib(walk)}" if walk else "") + f" + h_l {gib(h)}")
    return jac + max(work, eig) + h + walk, parts


def jac_workspace(m, real: int) -> int:
    """Bytes J_tt's formation holds beside J_tt, per block: the generic path's batched backward
    (JAC_CHUNK rows of the layer's activations); the hand-written attention blocks' (d, d)
    arrays and their column chunk (FAST_ATTENTION_WORKSPACE, the chunk as the block picks it);
    0 for the hand-written Mamba block, whose products are (d, d_inner) per token."""
    d = m.info.d_model
    if m.engine == "generic":
        return JAC_CHUNK * 8 * m.info.block_params // d * real
    if m.info.arch not in FAST_ATTENTION_ARCHS:
        return 0
    arrays, vectors = (at_measured(FAST_ATTENTION_WORKSPACE, d, i) for i in (0, 1))
    c = column_chunk(d, column_bytes(d, real))
    return int((arrays * d * d + vectors * c * d) * real)


def at_measured(points: dict, d: int, i: int) -> float:
    """Entry i of {width: (coefficients)} at width d: log-linear between the measured widths
    around d, the nearest one beyond them."""
    widths = sorted(points)
    if d <= widths[0] or d >= widths[-1]:
        return points[widths[0] if d <= widths[0] else widths[-1]][i]
    a = max(w for w in widths if w <= d)
    b = min(w for w in widths if w >= d)
    if a == b:
        return points[a][i]
    f = math.log(d / a) / math.log(b / a)
    return points[a][i] + f * (points[b][i] - points[a][i])


def variant_bytes(m) -> int:
    """What making a weight variant's weights adds (a null's or an ensemble member's): the cost
    its kind registers (sweep/checkpoints/kinds.py) on the route the model takes (the
    layer-local route, or the whole model)."""
    from sweep.checkpoints import kinds

    if m.variant is None:
        return 0
    return kinds.get(m.variant.kind).cost(whole=bool(m.info.not_local)).bytes(m.info)


def gib(n: int) -> str:
    return f"{n / GiB:.3g} GiB"
