"""The depth section's numbers (analysis/studies/depth.py) on stores written from matrices made for
it, through the engine's own writers and walk (sweep/store/writer.py, sweep/numerics/depth.py), where the
truth is known in closed form:

- one normal J repeated: non-normality 1, Henrici's departure 0, the alignment of a layer
  with itself (Σ|ζ|^{2s}/d)/(Σ|ζ|²/d)^s per token (1 when every |ζ| is equal), and the
  stack's per-step rates are the single block's, so β of every span recovers the drawn law;
- one Jordan-like J = a·I + c·N repeated (2×2 blocks): ‖J^s‖_F²/d = a^{2s} + s²a^{2s−2}c²/2,
  non-normality ((a² + c²/2)/a²)^s, a transient growth no eigenvalue shows;
- independent Haar-rotated layers U D Uᵀ: alignment → 1 as d grows (E tr(A V B Vᵀ) = tr A tr B/d);
- one direction amplified by k at every layer, the rest rotated at random: alignment
  ((k^{2s} + d − 1)/d) / ((k² + d − 1)/d)^s > 1, non-normality 1;
- a different rotation at every layer: every Lyapunov exponent 0, gain 1, nothing stable;
- the point estimates do not depend on the resampling seed.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import ortho_group
from synthetic_store import power_law_rates

from analysis import open_store
from analysis.report.depth import figure, markdown
from analysis.studies.depth import compare_depth, depth_study
from sweep.format import schema
from sweep.format.ledger import is_pending
from sweep.format.settings import Settings
from sweep.numerics.depth import DepthWalk
from sweep.numerics.spectra import eigvals, henrici, shift_direction
from sweep.store.writer import BlockValues, create_group, write_block, write_lyapunov, write_stack
from sweep.worker.depth import stack_values

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
                shift = tuple(a.numpy() for a in shift_direction(jac))
                write_block(g, layer, seq, block, t0, BlockValues(
                    eig, shift=shift, frobenius2=fro2, nonnormality=henrici(fro2, eig)))
                for start, span, p in walk.step(layer, jac):
                    write_stack(g, SPANS.index(span), start, seq, t0, stack_values(p, span))
            write_lyapunov(g, seq, block, t0, walk.lyapunov().numpy(), walk.lyapunov_qr().numpy())
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


def _geo(x) -> float:
    return float(np.exp(np.mean(np.log(x))))


def test_a_repeated_normal_block_is_normal_aligned_with_itself_and_keeps_its_power_law(tmp_path):
    jac = _normal(24, np.random.default_rng(0), -0.3)
    st = _write(tmp_path / "s.zarr", "normal", jac)
    d = depth_study(st, SETTINGS)
    mod2 = np.stack([np.abs(np.linalg.eigvals(jac(0, q, t))) ** 2 for q in range(SEQS)
                     for t in range(L)])                                  # (N, d)
    for p in d.kernel:
        s = p.span
        assert p.nonnormality.value == pytest.approx(1, abs=1e-10)
        assert p.arithmetic["nonnormality"] == pytest.approx(1, abs=1e-10)
        want = _geo((mod2 ** s).mean(1) / mod2.mean(1) ** s)
        assert p.alignment.value == pytest.approx(want, rel=1e-9), (p.layer, s)
        assert p.alignment.lo <= p.alignment.value <= p.alignment.hi
    for ly, h in d.nonnormality.items():
        assert h.value < 1e-6
    # the per-step rates of J^s are J's own: every span fits what one block fits (all-stable;
    # symmetry-removed also drops the mode along 𝟙 where these near-identity J keep 𝟙 within
    # the residual threshold, at every span)
    for s in d.spans:
        assert d.beta["all-stable"][s].beta == pytest.approx(d.beta["all-stable"][1].beta, abs=1e-6)
    row = d.beta["all-stable"][4]
    assert row.ci_lo <= -0.3 <= row.ci_hi, (row.beta, row.ci_lo, row.ci_hi)
    assert d.below_floor == {1: 0, 2: 0, 4: 0}
    # issue 57: panel (a) draws the headline's estimator, each span's point once (filled, or
    # hollow for a window slope), never the cumulative fit beside an MLE headline
    ax = figure(d, "normal", Settings(primary="mle:symmetry-removed").primary_for(False)).axes[0]
    drawn = sorted(y for ln in ax.get_lines() if ln.get_marker() == "o" for y in ln.get_ydata())
    want = sorted(d.beta[m][s].mle_beta for m in d.beta for s in d.spans)
    assert drawn == pytest.approx(want) and "[mle]" in ax.get_ylabel()


def test_a_scaled_rotation_repeated_has_both_ratios_one(tmp_path):
    q = ortho_group.rvs(6, random_state=np.random.default_rng(3))
    st = _write(tmp_path / "s.zarr", "rot", lambda layer, seq, t: 0.8 * q)
    for p in depth_study(st, SETTINGS).kernel:
        assert p.nonnormality.value == pytest.approx(1, rel=1e-10)
        assert p.alignment.value == pytest.approx(1, rel=1e-10)
        assert p.measured.value == pytest.approx(0.64 ** p.span, rel=1e-10)


def test_a_repeated_jordan_block_shows_its_transient_growth_as_non_normality(tmp_path):
    a, c, d = 0.7, 0.5, 8
    j = np.kron(np.eye(d // 2), np.array([[a, c], [0.0, a]]))
    st = _write(tmp_path / "s.zarr", "jordan", lambda layer, seq, t: j)
    study = depth_study(st, SETTINGS)
    for p in study.kernel:
        s = p.span
        measured = a ** (2 * s) + s * s * a ** (2 * s - 2) * c * c / 2
        assert p.measured.value == pytest.approx(measured, rel=1e-12)
        assert p.spectral.value == pytest.approx(a ** (2 * s), rel=1e-12)
        assert p.independent.value == pytest.approx((a * a + c * c / 2) ** s, rel=1e-12)
        assert p.nonnormality.value == pytest.approx((1 + c * c / (2 * a * a)) ** s, rel=1e-12)
        assert p.alignment.value == pytest.approx(measured / (a * a + c * c / 2) ** s, rel=1e-12)
        assert p.arithmetic["alignment"] == pytest.approx(p.alignment.value, rel=1e-12)
    # Henrici: ‖J‖_F² = d(a² + c²/2), Σ|ζ|² = d a²
    want = np.sqrt((c * c / 2) / (a * a + c * c / 2))
    assert study.nonnormality[0].value == pytest.approx(want, rel=1e-12)


def _haar(d, seed):
    """Per (layer, seq, t) an independent U D Uᵀ, D = diag(0.5 … 1.5)."""
    rng = np.random.default_rng(seed)
    diag = np.diag(np.linspace(0.5, 1.5, d))
    js = {(ly, q, t): (lambda u: u @ diag @ u.T)(ortho_group.rvs(d, random_state=rng))
          for ly in range(LAYERS) for q in range(SEQS) for t in range(L)}
    return lambda ly, q, t: js[ly, q, t]


def test_independent_haar_rotated_layers_lose_their_alignment_as_d_grows(tmp_path):
    off = {}
    for d in (4, 32):
        st = _write(tmp_path / f"h{d}.zarr", "haar", _haar(d, d))
        pts = [p for p in depth_study(st, SETTINGS).kernel if p.span == 4]
        assert all(abs(p.nonnormality.value - 1) < 1e-10 for p in pts)
        off[d] = max(abs(np.log(p.alignment.value)) for p in pts)
    assert off[32] < off[4] / 4 and off[32] < 0.02, off


def test_one_direction_amplified_at_every_layer_aligns_the_layers(tmp_path):
    k, d = 2.0, 8
    rng = np.random.default_rng(4)
    e = {(q, t): (lambda v: v / np.linalg.norm(v))(rng.standard_normal(d))
         for q in range(SEQS) for t in range(L)}

    def jac(ly, q, t):
        u = e[q, t][:, None]
        basis = np.linalg.qr(np.eye(d) - u @ u.T)[0][:, :d - 1]          # (d, d−1) ⟂ u
        turn = basis @ ortho_group.rvs(d - 1, random_state=rng) @ basis.T   # a rotation of ⟂ u
        return k * u @ u.T + turn

    cache = {}
    st = _write(tmp_path / "s.zarr", "amp",
                lambda ly, q, t: cache.setdefault((ly, q, t), jac(ly, q, t)))
    for p in depth_study(st, SETTINGS).kernel:
        s = p.span
        want = ((k ** (2 * s) + d - 1) / d) / ((k * k + d - 1) / d) ** s
        assert want > 1 or s == 1
        assert p.alignment.value == pytest.approx(want, rel=1e-9), (p.layer, s)


def test_point_estimates_do_not_depend_on_the_resampling_seed(tmp_path):
    st = _write(tmp_path / "s.zarr", "haar", _haar(6, 5))
    a, b = (depth_study(st, Settings(n_boot=100, seed=seed)) for seed in (0, 7))
    assert np.array_equal(a.lyapunov, b.lyapunov) and a.top.value == b.top.value
    for p, q in zip(a.kernel, b.kernel):
        for part in ("measured", "spectral", "independent", "nonnormality", "alignment"):
            assert getattr(p, part).value == getattr(q, part).value
        assert p.arithmetic == q.arithmetic
    # the jackknife over the store's sequences draws nothing: its intervals are seed-free too
    assert a.top.unit.startswith("jackknife over")
    assert all(p.alignment.lo == q.alignment.lo for p, q in zip(a.kernel, b.kernel))


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
    from sweep.format.schema import StoreError

    st = _write(tmp_path / "s.zarr", "j", lambda ly, s, t: np.eye(4) * 0.5)
    with pytest.raises(StoreError, match="span 3 not swept"):
        st.stack_eigenvalues(0, 3)
    with pytest.raises(StoreError, match="starts run 0..0"):
        st.stack_eigenvalues(1, 4)
    np.testing.assert_allclose(st.stack_eigenvalues(0, 4, seq=1), np.full((L, 4), 0.5 ** 4))


def test_a_format_4_depth_group_upgrades_to_singular_value_exponents_pending(tmp_path):
    """Format 4 stored Benettin's QR exponents as `lyapunov`: the upgrade keeps them as
    `lyapunov_qr` and sets the walks pending, so a resumed sweep stores the singular values."""
    import shutil

    import zarr

    from sweep.store.upgrade import upgrade

    path = tmp_path / "s.zarr"
    st = _write(path, "j", lambda ly, s, t: np.eye(4) * 0.5 + 0.1 * np.triu(np.ones((4, 4)), 1))
    qr = st.lyapunov_qr(1)
    g = zarr.open_group(str(path), path="j", mode="r+")
    g["lyapunov"][...] = g["lyapunov_qr"][...]                 # what format 4 held there
    for name in schema.STACK_ARRAYS_5:
        shutil.rmtree(path / "j" / name)
    zarr.open_group(str(path), mode="r+").attrs["tdos_format"] = 4
    assert upgrade(path) == 4
    st = open_store(path, "j")
    np.testing.assert_array_equal(np.asarray(g["lyapunov_qr"][1]), qr)
    assert is_pending(g["depth_ledger"][...]).all()
    assert np.isnan(st.lyapunov(1)).all() and np.isnan(st.stack_shift_direction(0, 2)[0]).all()


def test_the_kernel_ratios_are_read_against_nulls(tmp_path):
    """null_study reads ln non-normality and ln alignment of the kernel at the run's first
    start and longest span, in the trained model and its nulls, at their closed forms (Jordan
    blocks: non-normality (1 + c²/2a²)^s, alignment of one repeated block as in the test above)."""
    import zarr

    from analysis.studies.nulls import null_study
    from sweep.format.settings import Primary
    from sweep.format.variants import Variant

    a, d, path = 0.7, 8, tmp_path / "s.zarr"
    jordan = {c: np.kron(np.eye(d // 2), np.array([[a, c], [0.0, a]])) for c in (0.5, 0.1, 0.15)}
    _write(path, "m", lambda layer, seq, t: jordan[0.5])
    for k, c in enumerate((0.1, 0.15)):
        _write(path, f"m.shuffled.{k}", lambda layer, seq, t, c=c: jordan[c])
        zarr.open_group(str(path), mode="a")[f"m.shuffled.{k}"].attrs["variant"] = (
            Variant("shuffled", k, "m").attrs())
    study = null_study(open_store(path, "m"), 0, L, SETTINGS, Primary("cumulative", "all-stable", "test"))
    s = max(SPANS)
    [c] = [c for c in study.comparisons if c.observable.startswith("ln nonnormality")]
    assert c.observable == f"ln nonnormality of the kernel (l = 0, s = {s})"
    want = {cc: s * np.log1p(cc * cc / (2 * a * a)) for cc in (0.5, 0.1, 0.15)}
    assert c.trained.value == pytest.approx(want[0.5], rel=1e-9)
    assert sorted(c.null_values) == pytest.approx([want[0.1], want[0.15]], rel=1e-9)
    assert c.delta > 0 and c.rank == 2
    assert any(c.observable.startswith("ln alignment") for c in study.comparisons)
