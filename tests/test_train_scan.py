"""The training scan (training/mamba_train_scan.py) against transformers' reference scan.

The oracle is `modeling_mamba.mamba_selective_scan` itself, the recurrent path MambaMixer
runs without the CUDA kernels, differentiated by autograd. It runs in float64 on inputs drawn
in float32 (so its internal `.float()` casts of B and x are exact); its x and B gradients pass
back through those casts, hence float32-rounded: 1e-6 relative is the float64 bar.
Both backends are checked on values and on the gradients of all eight inputs, across lengths
that exercise one chunk, several chunks and a prime length, and in decay regimes where
products of decays underflow.
"""
from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from transformers import MambaConfig, MambaForCausalLM
from transformers.models.mamba import modeling_mamba

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = modeling_mamba.mamba_selective_scan


def _scan_module():
    """training/ holds scripts, not a package: load the scan module from its file."""
    spec = importlib.util.spec_from_file_location("mamba_train_scan",
                                                  ROOT / "training" / "mamba_train_scan.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ms = _scan_module()
needs_kernel = pytest.mark.skipif(ms.load_kernel() is None, reason="no C compiler for the fused kernel")
# backend -> (input dtype, max error relative to the largest reference entry)
BACKENDS = {"chunked": (torch.float64, 1e-6), "fused": (torch.float32, 2e-5)}


def leaves(b, d, L, N, seed=0, dt_shift=-2.0, a_scale=1.0):
    """x, dt, A, B, C, D, z, delta_bias in the MambaMixer's layouts, drawn in float32."""
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    return [r(b, d, L), r(b, d, L) + dt_shift, -a_scale * torch.exp(r(d, N)), r(b, N, L),
            r(b, N, L), r(d), r(b, d, L), r(d)]


def value_and_grads(scan, inputs, weight):
    """y, final state and the gradients of <weight, y>; weight (b, d, L) is a transposed view,
    so the gradient reaching the scan is not contiguous, as inside MambaMixer."""
    ts = [t.clone().requires_grad_() for t in inputs]
    y, last = scan(*ts[:5], D=ts[5], z=ts[6], delta_bias=ts[7], delta_softplus=True,
                   return_last_state=True)
    return [y, last, *torch.autograd.grad((y * weight).sum(), ts)]


def assert_matches_reference(backend, shape, **draw):
    dtype, tol = BACKENDS[backend]
    inputs = leaves(*shape, **draw)
    b, d, L = shape[:3]
    weight = torch.randn(b, L, d, generator=torch.Generator().manual_seed(1)).transpose(1, 2)
    new = value_and_grads(functools.partial(ms.selective_scan_fast, backend=backend),
                          [t.to(dtype) for t in inputs], weight.to(dtype))
    ref = value_and_grads(REFERENCE, [t.double() for t in inputs], weight.double())
    names = ["y", "final state", "dx", "ddt", "dA", "dB", "dC", "dD", "dz", "ddelta_bias"]
    for name, a, r in zip(names, new, ref):
        assert a.dtype == dtype and torch.isfinite(a).all(), name
        a, r = a.detach().double(), r.detach()
        err = float((a - r).abs().max() / r.abs().max().clamp_min(1e-30))
        assert err < tol, f"{backend} {shape} {name}: relative error {err:.2e}"


@pytest.mark.parametrize("backend", [pytest.param("fused", marks=needs_kernel), "chunked"])
@pytest.mark.parametrize("L", [1, 7, 16, 48, 37])  # < one chunk, one, three chunks, prime
def test_values_and_gradients_match_reference(backend, L):
    assert_matches_reference(backend, (2, 6, L, 4))


@needs_kernel
def test_fused_channel_blocks_and_a_partial_block():
    """d = 40: one full block of the kernel's JB = 32 channels and a partial one of 8."""
    assert ms.load_kernel().ssm_block() == 32  # else d = 40 would not split as intended
    assert_matches_reference("fused", (3, 40, 19, 5))


@pytest.mark.parametrize("backend", [pytest.param("fused", marks=needs_kernel), "chunked"])
def test_strong_decay_underflows_cleanly(backend):
    """|dt A| up to ~1e3 per step: products of decays underflow to 0 within a chunk."""
    assert_matches_reference(backend, (2, 4, 64, 8), dt_shift=3.0, a_scale=100.0)


@pytest.mark.parametrize("backend", [pytest.param("fused", marks=needs_kernel), "chunked"])
def test_weak_decay_carries_across_chunks(backend):
    """|dt A| ~ 1e-5 per step: the state is carried almost undamped across all chunks."""
    assert_matches_reference(backend, (2, 4, 64, 8), dt_shift=-8.0, a_scale=0.01)


def test_chunked_backend_matches_its_sequential_form():
    """Chunks of 16 against chunk = L (one sequential sweep): the carries are exact."""
    inputs = [t.double() for t in leaves(2, 4, 96, 8)]
    weight = torch.randn(2, 96, 4, dtype=torch.float64).transpose(1, 2)
    chunked, sequential = (value_and_grads(functools.partial(ms.selective_scan_fast,
                                                             backend="chunked", chunk=c),
                                           inputs, weight) for c in (16, 96))
    for a, b in zip(chunked, sequential):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_unknown_backend_is_named():
    with pytest.raises(ValueError, match="backend"):
        ms.selective_scan_fast(*leaves(1, 2, 4, 2)[:5], backend="cuda")


def assert_whole_model_unchanged(monkeypatch, swap, hidden_size, length):
    """A tiny MambaForCausalLM's loss and every parameter gradient under transformers' own
    mixer and reference scan, then again after `swap(monkeypatch)`: equal."""
    config = MambaConfig(vocab_size=256, hidden_size=hidden_size, num_hidden_layers=2,
                         state_size=8, expand=2, conv_kernel=4)
    torch.manual_seed(0)
    model = MambaForCausalLM(config).train()
    ids = torch.randint(0, 256, (2, length), generator=torch.Generator().manual_seed(2))

    def loss_and_grads():
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    monkeypatch.setattr(modeling_mamba, "mamba_selective_scan", REFERENCE)
    ref_loss, ref_grads = loss_and_grads()
    swap(monkeypatch)
    loss, grads = loss_and_grads()
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    for name, g in grads.items():
        torch.testing.assert_close(g, ref_grads[name], rtol=1e-3, atol=1e-5, msg=name)


def test_drop_in_through_the_unmodified_hf_model(monkeypatch):
    """transformers' mixer with the fast scan in place of its reference scan."""
    assert_whole_model_unchanged(monkeypatch, lambda mp: mp.setattr(
        modeling_mamba, "mamba_selective_scan", ms.selective_scan_fast), hidden_size=32, length=40)


@needs_kernel
def test_training_mixer_matches_transformers_mixer():
    """mixer_forward (conv + silu and the gated scan in C) against MambaMixer.forward in float64."""
    ms.check_mixer()
    ms.check_mixer(seed=3)


@needs_kernel
def test_the_mixer_check_can_fail():
    """A mixer 0.1 % off transformers' fails the check (its bar is 1e-4 relative)."""
    def off(self, hidden_states, **kwargs):
        return ms.mixer_forward(self, hidden_states, **kwargs) * 1.001
    with pytest.raises(AssertionError, match="mixer_forward vs transformers, output"):
        ms.check_mixer(off)


@needs_kernel
def test_training_mixer_through_the_whole_model(monkeypatch):
    """The training mixer (what install() puts in place) in place of transformers' mixer."""
    assert_whole_model_unchanged(monkeypatch, lambda mp: mp.setattr(
        modeling_mamba.MambaMixer, "forward", ms.mixer_forward), hidden_size=48, length=50)


def test_install_checks_then_swaps_the_scan_and_mixer_in(monkeypatch):
    """install() is what training calls: after its checks the MambaMixer runs the fast path."""
    monkeypatch.setattr(modeling_mamba, "mamba_selective_scan", REFERENCE)  # restored afterwards
    monkeypatch.setattr(modeling_mamba.MambaMixer, "forward", modeling_mamba.MambaMixer.forward)
    ms.install()
    assert modeling_mamba.mamba_selective_scan is ms.selective_scan_fast
    if ms.load_kernel() is not None:
        assert modeling_mamba.MambaMixer.forward is ms.mixer_forward
