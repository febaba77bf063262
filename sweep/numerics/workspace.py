"""How wide a chunk of J_tt's columns the hand-written attention blocks form at once.

Pure arithmetic, no torch: the blocks (sweep/blocks/attention.py) and the budget
(sweep/budget/memory.py) both follow it, so the dry run charges what a worker holds.
"""
from __future__ import annotations

# the bytes a chunk's temporaries may fill: every column at once up to d = 1024 in float64
# (160 MiB), a few hundred columns at Llama-3-70B's width (d = 8192, float64: 1.3 MB a
# column). A constant, not the worker's memory limit: chunks of another width may round
# differently in their GEMMs, and a store's bits must not depend on the machine's memory.
JAC_WORKSPACE_BYTES = 256 << 20
# (d,) temporaries one column of the chunk holds at the chunk's peak (the q, k, v tangents and
# their rotation, the attention's d o / d x, the norms' vmapped jvp and vjp, the MLP's (d_ff,)
# inner column): measured 14.9 at d = 576 and 19.0 at d = 1024, float64
# (benchmarks/results/bench_jtt_memory.md), rounded up
COLUMN_VECTORS = 20


def column_bytes(d: int, itemsize: int) -> int:
    """Bytes one of J_tt's columns holds while its chunk is formed."""
    return COLUMN_VECTORS * d * itemsize


def column_chunk(d: int, column: int, workspace_bytes: int = JAC_WORKSPACE_BYTES) -> int:
    """How many of J_tt's d columns to form at once: as many as `workspace_bytes` holds at
    `column` bytes a column (at least one), spread evenly over the chunks that takes."""
    fit = max(1, min(d, workspace_bytes // max(column, 1)))
    chunks = -(-d // fit)
    return -(-d // chunks)
