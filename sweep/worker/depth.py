"""A depth task: one token block walked up the run (docs/depth.md).

Each layer's J_tt is formed once (sweep/worker/block.py), stored as its single block, then
multiplied into the stacks (sweep/numerics/depth.py); the stacks of `spans` are written as
they complete, the Lyapunov exponents and the walk's ledger cell last.
"""
from __future__ import annotations

import collections
import time

from sweep.format.ledger import is_flagged
from sweep.numerics import linalg
from sweep.store import writer as store
from sweep.tasks import BlockTask, DepthTask
from sweep.worker import block, held


def run(state, task: DepthTask) -> dict:
    """Walk the task's block up its layers; its layers, status and seconds by phase."""
    from sweep.numerics.depth import DepthWalk

    state.keep_temporaries_on_heap()
    ref, clock = task.model, time.perf_counter
    since = state.resident.counters()
    row_of = dict((layer, row) for row, layer in task.rows)
    seconds = collections.Counter()
    flagged, walk, g = 0, None, state.arrays(ref)
    with linalg.using(ref.cpu_linalg) as libraries:
        for row, layer in task.rows:
            t = clock()
            model = held.model(state, ref, layer, task.seq)
            seconds["load"] += clock() - t
            one = BlockTask(ref, layer, row, task.seq, task.block, task.t0, task.t1, task.n_ctx)
            values, jac, secs, lib = block.compute(state, model, one, libraries)
            seconds.update(secs)
            t = clock()
            flagged += int(is_flagged(store.write_block(g, row, task.seq, task.block, task.t0,
                                                          values)))
            seconds["write"] += clock() - t
            t = clock()
            walk = walk or DepthWalk(task.spans, jac.shape[0], jac.shape[-1], dtype=jac.dtype,
                                     device=jac.device)
            for start, span, p in walk.step(layer, jac):
                store.write_stack(g, task.spans.index(span), row_of[start], task.seq, task.t0,
                                  stack_values(p, span))
            seconds["depth"] += clock() - t
        t = clock()
        store.write_lyapunov(g, task.seq, task.block, task.t0, walk.lyapunov().cpu().numpy(),
                             walk.lyapunov_qr().cpu().numpy())
        seconds["depth"] += clock() - t
    return {"model": ref.group, "seq": task.seq, "block": task.block,
            "walk_layers": [layer for _, layer in task.rows], "blocks": task.fresh,
            "status": "flagged" if flagged else "done", **state.fields(ref, since),
            "linalg": lib, "eig_backend": values.eig_backend, "jacobian_path": values.jacobian_path,
            "seconds": dict(seconds)}


def stack_values(p, span: int):
    """store.StackValues of one stack P (T, d, d) of `span` blocks."""
    from sweep.numerics.depth import gain, span_lyapunov
    from sweep.numerics.spectra import eigvals, shift_direction

    rho, resid = shift_direction(p)                         # (T,), (T,)
    return store.StackValues(eigvals(p).cpu().numpy(), gain(p).cpu().numpy(),
                             span_lyapunov(p, span).cpu().numpy(),
                             (rho.cpu().numpy(), resid.cpu().numpy()))
