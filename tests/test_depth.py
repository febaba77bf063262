"""Stacked blocks (sweep/numerics/depth.py): products of J_tt across consecutive layers and the
finite-depth Lyapunov exponents, against explicit matrix products and determinants."""
from __future__ import annotations

import math

import pytest
import torch

from sweep.numerics.depth import DepthWalk, gain


def _jacobians(layers: int, T: int, d: int, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.eye(d, dtype=torch.float64) + 0.4 * torch.randn(T, d, d, generator=gen,
                                                                   dtype=torch.float64)
            for _ in range(layers)]


def test_every_requested_product_arrives_once_and_equals_the_explicit_one():
    js = _jacobians(6, T=2, d=5)
    walk = DepthWalk([3, 2], T=2, d=5)
    got = {}
    for layer, j in enumerate(js, start=10):
        for start, span, p in walk.step(layer, j):
            assert (start, span) not in got
            got[start, span] = p
    want = {(s, n) for n in (2, 3) for s in range(10, 17 - n)}
    assert set(got) == want
    for (start, span), p in got.items():
        explicit = torch.eye(5, dtype=torch.float64).expand(2, 5, 5)
        for j in js[start - 10:start - 10 + span]:
            explicit = j @ explicit                         # the later layer on the left
        torch.testing.assert_close(p, explicit, rtol=1e-12, atol=1e-12)
    assert len(walk.partial) <= 2                           # at most max(spans) - 1 held


def test_lyapunov_exponents_sum_to_the_log_determinant_of_the_whole_stack():
    js = _jacobians(7, T=3, d=4, seed=1)
    walk = DepthWalk([7], T=3, d=4)
    (start, span, p), = [done for layer, j in enumerate(js) for done in walk.step(layer, j)]
    gamma = walk.lyapunov()                                               # (T, d)
    assert torch.all(gamma[:, :-1] >= gamma[:, 1:])                     # largest first
    log_det = torch.linalg.slogdet(p).logabsdet                           # (T,)
    torch.testing.assert_close(gamma.sum(-1) * 7, log_det, rtol=1e-10, atol=1e-10)
    eig = torch.linalg.eigvals(p).abs().log().sum(-1)                     # sum ln|zeta(P)|
    torch.testing.assert_close(gamma.sum(-1) * 7, eig, rtol=1e-8, atol=1e-8)


def test_deep_stacks_do_not_overflow():
    """400 layers of 10·diag(1, 1/2, 1/4): the product overflows float64 (10^400), the
    exponents are exactly ln 10 + ln(1, 1/2, 1/4)."""
    j = (10.0 * torch.diag(torch.tensor([1.0, 0.5, 0.25], dtype=torch.float64)))[None]
    walk = DepthWalk([1], T=1, d=3)
    for layer in range(400):
        walk.step(layer, j)
    want = math.log(10) + torch.log(torch.tensor([1.0, 0.5, 0.25], dtype=torch.float64))
    torch.testing.assert_close(walk.lyapunov()[0], want, rtol=1e-12, atol=1e-12)


def test_gain_is_the_mean_squared_response_to_a_random_unit_perturbation():
    gen = torch.Generator().manual_seed(2)
    p = torch.randn(1, 6, 6, generator=gen, dtype=torch.float64)
    u = torch.randn(200_000, 6, generator=gen, dtype=torch.float64)
    u = u / u.norm(dim=1, keepdim=True)
    monte_carlo = float(((u @ p[0].T) ** 2).sum(1).mean())
    assert abs(float(gain(p)[0]) - monte_carlo) < 0.02 * monte_carlo


def test_spans_must_be_positive():
    with pytest.raises(ValueError, match="spans must be integers >= 1"):
        DepthWalk([0, 2], T=1, d=2)
