"""How much memory one worker holds at its peak, from the plan: the process, the weights it
keeps, and the largest of its tasks' working sets (a block, a residual task, a memory task).

Every term is an upper bound of what tdos allocates for it; the process term is measured once
per environment (sweep/process.py).
"""
from __future__ import annotations

from sweep.format import dtypes

GiB, MiB = 1 << 30, 1 << 20
JAC_CHUNK = 512                     # cotangents per batched backward (sweep.generic.decode)
GRAPH_PER_TOKEN = 20                # a memory task's kept graph: activations of block_params / d
# the hand-written attention blocks (sweep/blocks/attention.py) vmap the attention part over
# a chunk of tokens whose (chunk, d, d) temporaries fill at most 16 MiB (at most 8 tokens):
# benchmarks/gguf_check.py measured 86 / 249 / 291 MiB of peak workspace for 2 / 8 / 16
# tokens at d = 576, float64 (a chunk of 6): 16-18 (chunk, d, d) arrays at once
FAST_ATTENTION_ARRAYS = 18
FAST_ATTENTION_ARCHS = ("gpt2", "gpt_neox", "llama")


def worker_bytes(m, cfg, process: int) -> tuple[int, str]:
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
        held = f"the whole model {gib(weights)}"
        stream = 0                                         # the model's own forward, one sequence
    else:
        keep = cfg.compute.resident_layers
        # while a layer is read, a tensor is held as stored and cast: half a layer at most
        weights = keep * layer + layer // 2 + (m.info.shared_params + L * d) * real
        held = (f"{keep} layer(s) x {gib(layer)} + reading one {gib(layer // 2)} + shared "
                f"modules and embedding rows")
        batch = min(residual_batch(m, L), cfg.inputs.sequences)
        stream = batch * 2 * h
    made = null_bytes(m)
    if made:
        weights += made
        held += f" + null weights made {gib(made)}"
    drawn = quant_bytes(m)
    if drawn:
        weights += drawn
        held += f" + one tensor drawn within its bins {gib(drawn)}"
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
    parts = (f"process {gib(process)} + {held} + max(block: J_tt {gib(jac)} + eig "
             f"{gib(eig)}" + (f" + {'backward' if m.engine == 'generic' else 'attention workspace'} "
                              f"{gib(work)}" if work else "")
             + (f" + stacks {gib(walk)}" if walk else "") + f" + h_l {gib(h)}, "
             f"residual task {gib(stream)}" + (f", memory task {gib(memory)}" if memory else "")
             + f") [{m.name}, {m.spec.dtype}"
             + (f"; whole model: {m.info.not_local}]" if m.info.not_local else "; layer-local]"))
    return process + weights + max(block, stream, memory), parts


def null_bytes(m) -> int:
    """What making a null's weights adds (sweep/generic/null.py): on the layer-local route the
    whole input embedding in float32 (then cut to a sequence's rows), plus a shuffled null's
    int64 permutation of it; on the whole-model route a second float32 copy of the model
    (random_init) or the largest tensor's permutation (shuffled, bounded by the embedding's)."""
    if m.null is None:
        return 0
    table = m.info.vocab_size * m.info.d_model
    perm = 8 * table if m.null["kind"] == "shuffled" else 0
    if m.info.not_local:
        return perm if perm else 4 * m.info.n_params
    return 4 * table + perm


def quant_bytes(m) -> int:
    """What drawing a quantization-ensemble member's tensor adds (sweep/generic/quant.py):
    its dequantized weights, gaps, draw and result in float64 (4 x 8 bytes per weight) of the
    largest tensor drawn at once, taken as half a layer (layer-local) or the input embedding
    (the whole model, which holds every tensor anyway)."""
    if m.quant is None:
        return 0
    largest = (m.info.vocab_size * m.info.d_model if m.info.not_local
               else m.info.block_params // 2)
    return 4 * 8 * largest


def gib(n: int) -> str:
    return f"{n / GiB:.3g} GiB"
