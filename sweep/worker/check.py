"""The self-check a worker runs on the first block of each model it holds
(sweep/generic/selfcheck.py): a later input that moves an earlier output, or an engine's J_tt
that differs from autograd of the unmodified layer's whole-sequence call, stops the sweep
before anything is written."""
from __future__ import annotations

import numpy as np
import torch

from sweep.errors import NonCausal, SelfCheckFailed
from sweep.numerics.dtypes import row_of
from sweep.tasks import ModelRef
from sweep.worker import resident


def whole(model, layer: int, ref: ModelRef) -> None:
    """Causality, then the engine's J_tt of one token against autograd of the unmodified
    layer's whole-sequence call; one line on either failure."""
    from sweep.generic import selfcheck

    ids = selfcheck.probe_ids(model.vocab_size)
    call = selfcheck.whole_sequence_call(model.hf, layer, ids)
    _check(call, lambda: model.token_jacobian(layer, ids, len(ids) - 1, ref.engine), layer,
           model.kinds[layer].kind, model.dtype, ref)


def local(g: dict, cached, layer: int, seq: int, ref: ModelRef) -> None:
    """The self-check of a layer-local model: the first probe tokens of sequence `seq` with
    their stored h_l (`g`: the model group's arrays) fed to the resident layer (the layer's map
    is checked on that input)."""
    from sweep.generic import selfcheck
    from sweep.plan.layers import layer_kinds

    lm = cached.model
    n = min(selfcheck.PROBE_TOKENS, int(np.asarray(g["layer_length"]).max()))
    row = int(np.flatnonzero(np.asarray(g["layer"]) == layer)[0])
    ids = torch.from_numpy(np.asarray(g["tokens"][seq, :n]))
    h = resident.stored(g, row, seq, n, lm.dtype).to(lm.device)
    call = resident.whole_sequence_call(cached, layer, ids, h)

    def jacobian():
        return resident.block(cached, ref, layer, ids, h, n - 1, n)[0][0]

    _check(call, jacobian, layer, layer_kinds(lm.model)[layer].kind, lm.dtype, ref)


def _check(call, jacobian, layer: int, kind: str, dtype, ref: ModelRef) -> None:
    """NonCausal or SelfCheckFailed (one line) unless `call` (the layer's whole-sequence
    call) is causal and `jacobian()` (d, d) its J_tt at the last token."""
    from sweep.generic import selfcheck
    from sweep.generic.decode import DeltaUnseen
    from sweep.worker.versions import versions_note

    dep = selfcheck.later_dependence(call)
    if dep > 0:
        raise NonCausal(f"{ref.path}: layer {layer}'s output at a token depends on later tokens "
                        f"(|J_ts| / |J_tt| up to {dep:.1e} for s > t) — its sequence Jacobian is "
                        f"not block lower-triangular, so eig(J_tt) is not its spectrum; sweep a "
                        f"causal decoder-only model")
    versions = (f"under {versions_note()} — nothing was written; install a tested release or "
                f"report it")
    try:
        jac = jacobian()                                                          # (d, d)
    except DeltaUnseen as e:
        raise SelfCheckFailed(f"{ref.path}: layer {layer} ({kind}): {e} {versions}") from None
    err, bound = selfcheck.diagonal_error(call, jac), selfcheck.bound(dtype)
    if not err <= bound:
        raise SelfCheckFailed(f"{ref.path}: layer {layer} ({kind}): the {ref.engine} path's J_tt "
                              f"differs from autograd of transformers' unmodified layer by "
                              f"{err:.1e} (bound {bound:g} in {row_of(dtype).name}) {versions}")
