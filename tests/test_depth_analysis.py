"""The depth section's numbers (analysis/studies/depth.py) on stores written from matrices made for
it, through the engine's own writers and walk (sweep/store/writer.py, sweep/numerics/depth.py), where the
truth is known in closed form:

- one normal J repeated: the measured kernel equals the inferred one (ratio 1), Henrici's
  departure is 0, and the stack's per-step rates are the single block's, so β of every span
  recovers the drawn power law;
- one Jordan-like J = a·I + c·N repeated (2×2 blocks): ‖J^s‖_F²/d = a^{2s} + s²a^{2s−2}c²/2,
  so the ratio is 1 + s²c²/(2a²), a transient growth no eigenvalue shows;
- a different rotation at every layer: every Lyapunov exponent 0, gain 1, nothing stable.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import ortho_group
from synthetic_store import power_law_rates

from analysis import open_store
from analysis.io import schema
from analysis.io.settings import Settings
from analysis.report.depth import figure, markdown
from analysis.studies.depth import compare_depth, depth_study
from sweep.numerics.depth import DepthWalk, gain
from sweep.numerics.spectra import eigvals, henrici
from sweep.store.writer import BlockValues, create_group, write_block, write_lyapunov, write_stack

SPANS, LAYERS, SEQS, L, B = [2, 4], 4, 4, 16, 8
SETTINGS = Settings(n_boot=200)


def _write(path, name, jacobians):
    """A group whose J_tt of (layer, seq, t) is jacobians(layer, seq, t) (d, d), walked and
    written as a sweep's DepthTask does."""
    import zarr

    d = jacobians(0, 0, 0).shape[0]
    root = zarr.open_group(str(path), mode="a")
    models = list(root.attrs.get("models", [])) + [name]
    root.attrs.update({"tdos_format": schema.FORMAT, "creation_id": "0" * 32, "models": models,
                       "fingerprint": "synthetic", "config": {}, "software": {}})
    g = create_group(root, name, identity={"path": name, "revision": None, "arch": "llama"},
                     checkpoint={"dir": None, "files": {}}, dtype="float64",
                     inputs={"sequences": SEQS, "length": L, "seed": 0, "text": None},
                     layer_lengths=[(ly, L) for ly in range(LAYERS)], token_block=B,
                     tokens=np.zeros((SEQS, L), np.int64), d_model=d,
                     layer_kinds=["attention"] * LAYERS,
                     depth={"spans": SPANS, "layers": [0, LAYERS - 1]})
    for seq in range(SEQS):
        for block, t0 in enumerate(range(0, L, B)):
            walk = DepthWalk(SPANS, B, d)
            for layer in range(LAYERS):
                jac = torch.stack([torch.as_tensor(jacobians(layer, seq, t), dtype=torch.float64)
                                   for t in range(t0, t0 + B)])
                eig = eigvals(jac).numpy()
                fro2 = jac.square().sum((1, 2)).numpy()
                write_block(g, layer, seq, block, t0, BlockValues(
                    eig, frobenius2=fro2, nonnormality=henrici(fro2, eig)))
                for start, span, p in walk.step(layer, jac):
                    write_stack(g, SPANS.index(span), start, seq, t0, eigvals(p).numpy(),
                                gain(p).numpy())
            write_lyapunov(g, seq, block, t0, walk.lyapunov().numpy())
    return open_store(path, name)


def _normal(d, rng, beta):
    """Per token a symmetric J = Q diag(e^{−λ}) Qᵀ, λ drawn with density ∝ λ^β below 0.05,
    the same at every layer."""
    cache = {}

    def jac(layer, seq, t):
        if (seq, t) not in cache:
            q = ortho_group.rvs(d, random_state=rng)
            lam = power_law_rates(rng, d, beta, 0.05)
            cache[seq, t] = q @ np.diag(np.exp(-lam)) @ q.T
        return cache[seq, t]
    return jac


def test_a_repeated_normal_block_gives_kernel_ratio_one_and_keeps_its_power_law(tmp_path):
    st = _write(tmp_path / "s.zarr", "normal", _normal(24, np.random.default_rng(0), -0.3))
    d = depth_study(st, SETTINGS)
    for p in d.kernel:
        assert abs(p.ratio.value - 1) < 1e-10, (p.layer, p.span, p.ratio)
        assert p.ratio.lo <= 1 <= p.ratio.hi + 1e-12
    for ly, h in d.nonnormality.items():
        assert h.value < 1e-6
    # the per-step rates of J^s are J's own: every span fits what one block fits
    for s in d.spans:
        for m in ("all-stable", "symmetry-removed"):
            assert d.beta[m][s].beta == pytest.approx(d.beta["all-stable"][1].beta, abs=1e-6)
    row = d.beta["all-stable"][4]
    assert row.ci_lo <= -0.3 <= row.ci_hi, (row.beta, row.ci_lo, row.ci_hi)
    assert d.below_floor == {1: 0, 2: 0, 4: 0}


def test_a_repeated_jordan_block_shows_its_transient_growth(tmp_path):
    a, c, d = 0.7, 0.5, 8
    j = np.kron(np.eye(d // 2), np.array([[a, c], [0.0, a]]))
    st = _write(tmp_path / "s.zarr", "jordan", lambda layer, seq, t: j)
    study = depth_study(st, SETTINGS)
    for p in study.kernel:
        s = p.span
        want = a ** (2 * s) + s * s * a ** (2 * s - 2) * c * c / 2
        assert p.measured.value == pytest.approx(want, rel=1e-12)
        assert p.inferred.value == pytest.approx(a ** (2 * s), rel=1e-12)
        assert p.ratio.value == pytest.approx(1 + s * s * c * c / (2 * a * a), rel=1e-12)
    # Henrici: ‖J‖_F² = d(a² + c²/2), Σ|ζ|² = d a²
    want = np.sqrt((c * c / 2) / (a * a + c * c / 2))
    assert study.nonnormality[0].value == pytest.approx(want, rel=1e-12)


def test_rotations_have_zero_lyapunov_exponents_and_unit_gain(tmp_path):
    rng = np.random.default_rng(1)
    rot = {(ly, s, t): ortho_group.rvs(6, random_state=rng)
           for ly in range(LAYERS) for s in range(SEQS) for t in range(L)}
    st = _write(tmp_path / "s.zarr", "rotations", lambda ly, s, t: rot[ly, s, t])
    gamma = st.lyapunov(0)
    assert gamma.shape == (L, 6) and np.abs(gamma).max() < 1e-12
    d = depth_study(st, SETTINGS)
    assert abs(d.top.value) < 1e-12 and d.positive.value <= 6
    for p in d.kernel:
        assert p.measured.value == pytest.approx(1, abs=1e-12)
    assert not d.beta["symmetry-removed"][4].fitted          # |ζ| = 1: nothing stable
    text = "\n".join(markdown(d))
    assert "Lyapunov" in text and "not fitted" in text
    figure(d, "rotations")                                   # draws with nothing fitted


def test_two_models_compare_at_every_span_and_on_the_top_exponent(tmp_path):
    rng = np.random.default_rng(2)
    a = _write(tmp_path / "s.zarr", "a", _normal(16, rng, -0.3))
    b = _write(tmp_path / "s.zarr", "b", _normal(16, rng, -0.3))
    studies = {n: depth_study(st, SETTINGS) for n, st in (("a", a), ("b", b))}
    deltas = compare_depth(studies, 0.9)
    betas = [x for x in deltas if x.what == "beta"]
    assert {(x.span, x.modes) for x in betas} == {(s, m) for s in (1, 2, 4)
                                                   for m in ("all-stable", "symmetry-removed")}
    # the same law drawn twice: β agrees at every span
    assert all(x.lo <= 0 <= x.hi for x in betas), [(x.span, x.delta, x.lo, x.hi) for x in betas]
    top = next(x for x in deltas if x.what == "top_lyapunov")
    assert top.lo <= top.delta <= top.hi


def test_readers_refuse_what_was_not_swept(tmp_path):
    from analysis.io.schema import StoreError

    st = _write(tmp_path / "s.zarr", "j", lambda ly, s, t: np.eye(4) * 0.5)
    with pytest.raises(StoreError, match="span 3 not swept"):
        st.stack_eigenvalues(0, 3)
    with pytest.raises(StoreError, match="starts run 0..0"):
        st.stack_eigenvalues(1, 4)
    np.testing.assert_allclose(st.stack_eigenvalues(0, 4, seq=1), np.full((L, 4), 0.5 ** 4))
