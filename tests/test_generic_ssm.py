"""The structured derivatives of sweep/generic/ssm.py against autograd of transformers' own ops.

tdos replaces the backward (never the values) of transformers' one-token Mamba-style ops: the
selective state update of Mamba-1 and Mamba-2, and the causal convolution before it. The
oracle is plain autograd through transformers' reference implementation, unpatched, with the
backward taken row by row; tdos' derivative runs as in a sweep, under torch.vmap over
autograd.grad with identity cotangents: every Jacobian entry of the op's output with respect
to every input that depends on the token.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers.models.mamba import modeling_mamba as m1
from transformers.models.mamba2 import modeling_mamba2 as m2

from sweep.generic import ssm

F64 = torch.float64


def _jacobians(call, inputs: dict, wrt: list[str], batched: bool) -> list[torch.Tensor]:
    """d out / d inputs[k] for k in wrt, each (out.numel(), inputs[k].numel()): by the batched
    backward a sweep runs (torch.vmap over autograd.grad, identity cotangents), or row by row."""
    leaves = {k: v.detach().clone().requires_grad_(k in wrt) if isinstance(v, torch.Tensor) else v
              for k, v in inputs.items()}
    # transformers' Mamba-2 op updates the state in place after autograd saved it: autograd
    # keeps copies of what it saves (what a sweep does for exactly those tensors)
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(torch.clone, lambda t: t):
        out = call(**leaves)
        eye = torch.eye(out.numel(), dtype=out.dtype).reshape(-1, *out.shape)
        xs = [leaves[k] for k in wrt]
        if batched:
            grads = torch.vmap(lambda v: torch.autograd.grad(out, xs, v, retain_graph=True))(eye)
        else:
            rows = [torch.autograd.grad(out, xs, v, retain_graph=True) for v in eye]
            grads = [torch.stack(r) for r in zip(*rows)]
    return [g.reshape(out.numel(), -1) for g in grads]


# how transformers calls each op: the kernel's leading arguments by position, the rest by name
POSITIONAL = {ssm.UPDATE: ("state", "x", "dt", "A", "B", "C", "D"),
              ssm.CONV: ("x", "conv_state", "weight", "bias")}


def _called(fn, op):
    """fn(**inputs by the kernel's public names), called the way transformers calls it."""
    def call(**a):
        return fn(*(a[k] for k in POSITIONAL[op]), **{k: v for k, v in a.items() if k not in POSITIONAL[op]})
    return call


def _compare(fn, op, inputs, wrt, state_key, structured=True):
    ours = _called(ssm._Wrapped(fn, op, [], structured), op)
    fn = _called(fn, op)
    ref_state, our_state = inputs[state_key].clone(), inputs[state_key].clone()
    with torch.no_grad():
        ref_out = fn(**{**inputs, state_key: ref_state})
    with torch.enable_grad():
        our_out = ours(**{**inputs, state_key: our_state}).detach()
    assert torch.equal(our_out, ref_out)                 # transformers' values, untouched
    assert torch.equal(our_state, ref_state)             # and its in-place state update
    ref = _jacobians(lambda **a: fn(**{**a, state_key: a[state_key].clone()}), inputs, wrt, False)
    got = _jacobians(lambda **a: ours(**{**a, state_key: a[state_key].clone()}), inputs, wrt, True)
    for name, r, g in zip(wrt, ref, got):
        scale = float(r.abs().max())
        assert scale > 0, name                           # the cotangent really reaches it
        err = float((g - r).abs().max()) / scale
        # transformers takes the decay exp(Δ A) in float32 in its reference op, tdos' VJP too
        assert err < 1e-6, f"d out / d {name}: {err:.1e}"


def _rand(*shape, gen):
    return torch.randn(*shape, generator=gen, dtype=F64)


@pytest.mark.parametrize("softplus, gated", [(True, True), (True, False), (False, True)])
def test_mamba1_state_update_vjp(softplus, gated):
    g = torch.Generator().manual_seed(1)
    b, D, N = 1, 6, 4
    inputs = {"state": _rand(b, D, N, gen=g), "x": _rand(b, D, gen=g),
              "dt": _rand(b, D, gen=g) * 0.5, "A": -torch.rand(D, N, generator=g, dtype=F64) - 0.1,
              "B": _rand(b, N, gen=g), "C": _rand(b, N, gen=g), "D": _rand(D, gen=g),
              "dt_bias": _rand(D, gen=g) * 0.1, "dt_softplus": softplus,
              "z": _rand(b, D, gen=g) if gated else None}
    wrt = ["x", "dt", "B", "C"] + (["z"] if gated else [])
    _compare(m1.mamba_selective_state_update, ssm.UPDATE, inputs, wrt, "state")


@pytest.mark.parametrize("groups", [1, 2])
def test_mamba2_state_update_vjp(groups):
    g = torch.Generator().manual_seed(2)
    b, H, P, N = 1, 4, 3, 5
    inputs = {"state": _rand(b, H, P, N, gen=g), "x": _rand(b, H, P, gen=g),
              "dt": (_rand(b, H, 1, gen=g) * 0.5).expand(b, H, P).contiguous(),
              "A": (-torch.rand(H, 1, 1, generator=g, dtype=F64) - 0.1).expand(H, P, N).contiguous(),
              "B": _rand(b, groups, N, gen=g), "C": _rand(b, groups, N, gen=g),
              "D": _rand(H, 1, gen=g).expand(H, P).contiguous(),
              "dt_bias": (_rand(H, 1, gen=g) * 0.1).expand(H, P).contiguous(), "dt_softplus": True,
              "z": None}
    _compare(m2.mamba2_selective_state_update, ssm.UPDATE, inputs, ["x", "dt", "B", "C"], "state")


@pytest.mark.parametrize("module", [m1, m2], ids=["mamba", "mamba2"])
@pytest.mark.parametrize("activation", ["silu", None])
def test_causal_conv_update_vjp(module, activation):
    g = torch.Generator().manual_seed(3)
    b, C, K = 1, 7, 4
    inputs = {"x": _rand(b, C, 1, gen=g), "conv_state": _rand(b, C, K, gen=g),
              "weight": _rand(C, K, gen=g), "bias": _rand(C, gen=g), "activation": activation}
    assert ssm._ConvUpdate.applies(inputs)
    _compare(module.causal_conv1d_update, ssm.CONV, inputs, ["x"], "conv_state")


def test_conv_update_falls_back_where_it_does_not_apply():
    """Several new tokens (a prefill) or an activation without a derivative here: transformers'
    own op, with its own autograd."""
    g = torch.Generator().manual_seed(4)
    two = {"x": _rand(1, 3, 2, gen=g), "conv_state": _rand(1, 3, 4, gen=g),
           "weight": _rand(3, 4, gen=g), "bias": None, "activation": "silu"}
    assert not ssm._ConvUpdate.applies(two)
    assert not ssm._ConvUpdate.applies({**two, "x": two["x"][..., :1], "activation": "gelu"})
    _compare(m2.causal_conv1d_update, ssm.CONV, two, ["x"], "conv_state")


MAMBA_MODULES = ["mamba", "falcon_mamba", "jamba", "mamba2", "bamba", "zamba2", "falcon_h1",
                 "granitemoehybrid", "nemotron_h"]


@pytest.mark.parametrize("family", MAMBA_MODULES)
def test_every_mamba_style_module_exposes_both_ops(family):
    """In each modeling module, exactly one attribute is the state update and one the
    convolution, recognised by the kernel each stands for (not by its Python name)."""
    import importlib

    mod = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    found = sorted(op for name, fn in vars(mod).items() if (op := ssm.op_of(name, fn)))
    assert found == sorted([ssm.CONV, ssm.UPDATE])


def test_a_call_that_does_not_fit_goes_through_plain_autograd():
    """A state update whose B has a layout _vjp is not written for (here B per channel):
    transformers' op under plain autograd, the same values and derivative, and named."""
    g = torch.Generator().manual_seed(5)
    b, D, N = 1, 4, 3
    inputs = {"state": _rand(b, D, N, gen=g), "x": _rand(b, D, gen=g), "dt": _rand(b, D, gen=g),
              "A": -torch.rand(D, N, generator=g, dtype=F64) - 0.1, "B": _rand(b, D, N, gen=g),
              "C": _rand(b, N, gen=g), "D": None, "dt_bias": None, "dt_softplus": True, "z": None}
    assert ssm._bound(ssm.UPDATE, (inputs["state"], inputs["x"], inputs["dt"], inputs["A"],
                                   inputs["B"], inputs["C"]), {}) is None
    ssm.fallbacks.clear()
    _compare(_update_with_channel_b, ssm.UPDATE, inputs, ["x", "dt", "C"], "state")
    assert ssm.fallbacks == {ssm.UPDATE}


def _update_with_channel_b(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False):
    """A selective state update whose B is per channel (b, D, N), updating state in place."""
    step = F.softplus(dt)[..., None]                                     # (b, D, 1)
    state.copy_(state * torch.exp(step * A) + step * B * x[..., None])
    return torch.einsum("bdn,bn->bd", state.clone(), C)


def test_structured_derivatives_can_be_turned_off():
    """structured=False: the reference route, plain autograd through transformers' op."""
    g = torch.Generator().manual_seed(6)
    b, D, N = 1, 5, 3
    inputs = {"state": _rand(b, D, N, gen=g), "x": _rand(b, D, gen=g), "dt": _rand(b, D, gen=g),
              "A": -torch.rand(D, N, generator=g, dtype=F64) - 0.1, "B": _rand(b, N, gen=g),
              "C": _rand(b, N, gen=g), "D": _rand(D, gen=g), "dt_bias": None, "dt_softplus": True,
              "z": None}
    ssm.fallbacks.clear()
    _compare(m1.mamba_selective_state_update, ssm.UPDATE, inputs, ["x", "dt", "B", "C"], "state",
             structured=False)
    assert not ssm.fallbacks
