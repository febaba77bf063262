"""Reading the store, incremental aggregation (== one from-scratch pass), mode classes."""
import numpy as np
import pytest
import zarr
from synthetic_store import planned_mask, synthetic_model, write_blocks, write_store

from analysis import (StoreError, aggregate, block_rates, classify, fit_ir_exponent,
                      fit_ir_from_hist, open_store)
from analysis.io.aggregate import Aggregate
from analysis.spectrum.rates import histogram


@pytest.fixture(scope="module")
def model():
    # row 1 plans only 20 of 32 tokens (per-layer length; the last block is partial)
    return synthetic_model(rows=2, lmax=32, d=24, n_ir=12, layer_length=[32, 20], seed=5)


def test_open_store_errors_are_one_line(tmp_path):
    with pytest.raises(StoreError, match="no store at"):
        open_store(tmp_path / "missing.zarr")
    zarr.open_group(str(tmp_path / "foreign.zarr"), mode="w").attrs["x"] = 1
    with pytest.raises(StoreError, match="not a tdos store"):
        open_store(tmp_path / "foreign.zarr")
    (tmp_path / "plain").mkdir()
    with pytest.raises(StoreError) as e:
        open_store(tmp_path / "plain")
    assert "\n" not in str(e.value)


def test_store_reads_what_was_written(tmp_path, model):
    mask = planned_mask(model)
    mask[0, 1, 2] = 0          # pending
    mask[0, 0, 1] = 2          # flagged: non-finite values, excluded but counted
    write_store(tmp_path / "s.zarr", [model], done={model.name: mask})
    st = open_store(tmp_path / "s.zarr")
    assert st.layers == [0, 2] and st.n_seqs == 2 and st.dtype == "float32" and st.arch == "mamba"
    assert st.block_counts() == {"planned": 14, "done": 13, "flagged": 1, "pending": 1}
    assert (0, 0, 1) not in st.usable_blocks() and (2, 1, 2) in st.usable_blocks()
    ev = st.eigenvalues(2, seq=1)
    assert ev.shape == (20, 24)                                  # beyond planned length: dropped
    np.testing.assert_array_equal(ev, model.eigenvalues[1, 1, :20])
    ev0 = st.eigenvalues(0, seq=0)
    assert np.isnan(ev0[8:16]).all() and np.isfinite(ev0[:8]).all()   # flagged block
    assert np.isnan(st.eigenvalues(0, seq=1)[16:24]).all()           # pending block
    np.testing.assert_allclose(st.delta(0, 0)[:8], model.delta[0, 0, :8], rtol=1e-6)
    np.testing.assert_allclose(st.intrinsic_rates(4), np.exp(model.a_log[4]).ravel(), rtol=1e-6)
    np.testing.assert_array_equal(st.tokens(1), np.arange(32, 64))   # synthetic default ids


def test_partial_then_complete_aggregation_equals_one_pass(tmp_path, model):
    first = planned_mask(model)
    first[:, :, ::2] = 0                                     # half the ledger
    path = tmp_path / "run.zarr"
    write_store(path, [model], done={model.name: first})
    aggregate(path)
    write_blocks(path, model, planned_mask(model) * (first == 0))    # the sweep finishes
    inc = aggregate(path)
    ref = aggregate(path, path=str(tmp_path / "scratch.agg"))
    for name in ("hist_all_stable", "hist_symmetry_removed", "hist_eff", "hist_delta",
                 "special_all_stable", "special_symmetry_removed", "min_rate_all_stable",
                 "min_rate_symmetry_removed", "ledger"):
        np.testing.assert_array_equal(inc.g[name][:], ref.g[name][:], err_msg=name)
    # and the aggregate equals the raw rates of every stored token
    st = open_store(path)
    for layer in st.layers:
        cls = classify(np.concatenate([st.eigenvalues(layer, s) for s in range(2)]), 1e-9)
        np.testing.assert_array_equal(inc.hist(layer, modes="symmetry-removed"), histogram(cls.stable))
        assert fit_ir_from_hist(inc.hist(layer, modes="symmetry-removed")).s == fit_ir_exponent(cls.stable).s


def test_update_reads_only_new_blocks(tmp_path, model):
    from analysis.io.aggregate import agg_path, update_model
    path = tmp_path / "run.zarr"
    first = planned_mask(model)
    first[1] = 0
    write_store(path, [model], done={model.name: first})
    aggregate(path)
    root = zarr.open_group(agg_path(path), mode="r+")
    assert update_model(open_store(path), root) == 0          # nothing new
    write_blocks(path, model, planned_mask(model) * (first == 0))
    assert update_model(open_store(path), root) == 2 * 3      # row 1: 2 seqs x 3 blocks


def test_a_store_opened_mid_sweep_is_a_snapshot(tmp_path, model):
    """A Store reads its ledger once (docs/api.md): blocks written after it was opened stay
    pending (NaN rows) in it, per-token rows included, and show in a Store opened again."""
    import dataclasses

    m = dataclasses.replace(model, frobenius2=np.abs(model.eigenvalues).sum(-1) ** 2)
    first = planned_mask(m)
    first[:, :, 1:] = 0                                      # each row's first block only
    path = tmp_path / "run.zarr"
    write_store(path, [m], done={m.name: first})
    before = open_store(path)
    assert np.isnan(before.eigenvalues(0, 0)[8:]).all() and np.isnan(before.frobenius2(0, 0)[8:]).all()
    write_blocks(path, m, planned_mask(m) * (first == 0))    # the sweep finishes
    assert np.isnan(before.eigenvalues(0, 0)[8:]).all() and np.isnan(before.frobenius2(0, 0)[8:]).all()
    after = open_store(path)
    np.testing.assert_array_equal(after.eigenvalues(0, 0), m.eigenvalues[0, 0])
    np.testing.assert_allclose(after.frobenius2(0, 0), m.frobenius2[0, 0], rtol=1e-6)


def test_marginal_unstable_zero_modes_are_counted_apart(tmp_path, model):
    write_store(tmp_path / "run.zarr", [model])
    agg = aggregate(tmp_path / "run.zarr")
    sp = agg.special(0, modes="symmetry-removed")
    n_tok = 2 * 32
    # token_spectrum: one ζ≈1 (|λ| < 1e-9 after complex64 rounding) and one |ζ|>1 per token,
    # ζ = 0 at t % 16 == 5
    # no scale arrays in this store: the value rule alone, no "scale" mode
    assert sp == {"marginal": n_tok, "unstable": n_tok, "zero": 4, "nonfinite": 0, "scale": 0,
                  "tokens": n_tok}
    assert agg.hist(0, modes="symmetry-removed").sum() == n_tok * 24 - 2 * n_tok - 4
    # layer 2 is planned for 20 tokens: its last block (16..23) holds 4 real tokens, not 8
    assert agg.special(2)["tokens"] == 2 * 20
    assert agg.min_rate(0, modes="symmetry-removed") > 1e-9
    with np.errstate(divide="ignore"):                        # the ζ = 0 modes
        lam = -np.log(np.abs(model.eigenvalues[0].astype(np.complex128)))
    assert (np.abs(lam) < 1e-9).sum() == n_tok               # the truth the threshold must find
    assert Aggregate(agg.path).threshold == 1e-9


def _with_scale_mode(m, lam_scale=3e-4):
    """m with its ζ≈1 mode moved to ζ = 1 − lam_scale (the norm's eps term: inside the fit
    window) and ρ_t, r_t stored: r_t = 1e-5 (h_t an eigenvector) except r_t = 0.5 (not one)
    at t % 8 == 3, and ρ_t unwritten (NaN) at t % 8 == 6."""
    ev = m.eigenvalues.copy()                                             # (rows, seq, L, d)
    near = np.argmin(np.abs(ev - 1), axis=-1)[..., None]                  # (rows, seq, L, 1)
    np.put_along_axis(ev, near, np.complex64(1 - lam_scale), axis=-1)
    t = np.arange(m.shape[2])
    rho = np.broadcast_to(np.float32(1 - lam_scale * (1 + 1e-3)), m.shape[:3]).copy()
    rho[..., t % 8 == 6] = np.nan
    resid = np.where(t % 8 == 3, 0.5, 1e-5) * np.ones(m.shape[:3], np.float32)
    m.eigenvalues, m.scale_rayleigh, m.scale_residual = ev, rho, resid
    return m


def test_scale_mode_is_found_by_its_eigenvector_and_kept_out_of_the_rates(tmp_path):
    m = _with_scale_mode(synthetic_model(rows=2, lmax=32, d=24, n_ir=12, seed=7))
    path = tmp_path / "run.zarr"
    first = planned_mask(m)
    first[:, :, 1::2] = 0
    write_store(path, [m], done={m.name: first})
    aggregate(path)
    write_blocks(path, m, planned_mask(m) * (first == 0))                 # incremental == one pass
    inc = aggregate(path)
    ref = aggregate(path, path=str(tmp_path / "scratch.agg"))
    for name in ("hist_symmetry_removed", "special_symmetry_removed", "min_rate_symmetry_removed"):
        np.testing.assert_array_equal(inc.g[name][:], ref.g[name][:], err_msg=name)
    n_tok, n_scale = 2 * 32, 2 * 32 * 6 // 8              # t % 8 in {3, 6}: no scale mode
    sp = inc.special(0, modes="symmetry-removed")
    assert inc.scale_by_eigenvector and sp["tokens"] == n_tok
    assert (sp["scale"], sp["marginal"], sp["unstable"], sp["zero"]) == (n_scale, 0, n_tok, 4)
    # the raw path (block_rates, used by the fits) agrees with the aggregate bin for bin
    st = open_store(path)
    cls = block_rates(st, 0, modes="symmetry-removed")
    assert cls.scale == n_scale and np.sum(np.isclose(cls.stable, 3e-4, rtol=1e-3)) == n_tok - n_scale
    np.testing.assert_array_equal(inc.hist(0, modes="symmetry-removed"), histogram(cls.stable))
    assert inc.hist(0, modes="symmetry-removed").sum() == n_tok * 24 - n_tok - 4 - n_scale


def test_tokens_without_scale_direction_fall_back_to_the_value_rule(tmp_path):
    m = _with_scale_mode(synthetic_model(rows=1, lmax=16, d=24, n_ir=12, seed=8))
    m.scale_rayleigh = m.scale_residual = None             # NaN: not computed (upgraded store)
    write_store(tmp_path / "old.zarr", [m])
    agg = aggregate(tmp_path / "old.zarr")
    sp = agg.special(0, modes="symmetry-removed")
    assert sp["scale"] == 0 and sp["marginal"] == 0
    # 1 − 3e-4 is no rounding of 1: by value alone it poses as a stable in-window mode
    assert np.sum(np.isclose(block_rates(open_store(tmp_path / "old.zarr"), 0, modes="symmetry-removed").stable, 3e-4,
                             rtol=1e-3)) == 2 * 16


def test_shift_direction_removes_a_second_mode_exactly_and_incrementally(tmp_path):
    # a parallel-residual LayerNorm block: besides the scale mode (ζ = 1 − 3e-4 here) an
    # exact ζ = 1 along 𝟙/√d, stored in fp32 as 1 − 6e-8 (λ ≈ 6e-8: a fake deep-IR mode)
    m = _with_scale_mode(synthetic_model(rows=2, lmax=32, d=24, n_ir=12, seed=9))
    ev = m.eigenvalues.copy()                                             # (rows, seq, L, d)
    far = np.argmax(np.abs(ev - 1) * (np.abs(ev) > 0), axis=-1)[..., None]  # a physical mode
    np.put_along_axis(ev, far, np.complex64(1 - 6e-8), axis=-1)
    t = np.arange(m.shape[2])
    m.eigenvalues = ev
    m.shift_rayleigh = np.ones(m.shape[:3], np.float32)
    m.shift_residual = np.where(t % 8 == 5, 0.5, 1e-7) * np.ones(m.shape[:3], np.float32)
    path = tmp_path / "run.zarr"
    first = planned_mask(m)
    first[:, :, ::2] = 0
    write_store(path, [m], done={m.name: first})
    aggregate(path)
    write_blocks(path, m, planned_mask(m) * (first == 0))
    inc = aggregate(path)
    ref = aggregate(path, path=str(tmp_path / "scratch.agg"))
    for name in ("hist_symmetry_removed", "special_symmetry_removed", "min_rate_symmetry_removed"):
        np.testing.assert_array_equal(inc.g[name][:], ref.g[name][:], err_msg=name)
    n_tok = 2 * 32
    n_scale = n_tok * 6 // 8 + n_tok * 7 // 8                 # scale: t%8∉{3,6}; shift: t%8≠5
    sp = inc.special(0, modes="symmetry-removed")
    assert inc.shift_by_eigenvector and sp["scale"] == n_scale
    st = open_store(path)
    cls = block_rates(st, 0, modes="symmetry-removed")
    assert cls.scale == n_scale
    assert np.sum(cls.stable < 1e-6) == n_tok // 8                         # t % 8 == 5 keeps it
    np.testing.assert_array_equal(inc.hist(0, modes="symmetry-removed"), histogram(cls.stable))
    rho, r = st.norm_directions(0, 0)
    assert rho.shape == r.shape == (32, 2) and np.all(rho[:, 1] == 1)


def test_aggregate_of_a_store_made_again_at_the_same_path_is_rebuilt(tmp_path):
    """Same config (fingerprint), other content: a text file or the weights changed behind
    their paths and the store was deleted and swept again. Its aggregate is rebuilt, and the
    in-process cache of aggregate arrays serves the new content."""
    import shutil

    path = tmp_path / "run.zarr"
    old, new = (synthetic_model(rows=1, lmax=16, d=24, n_ir=12, beta=b, seed=s)
                for b, s in ((-0.2, 1), (0.3, 2)))
    write_store(path, [old])
    fingerprint = zarr.open_group(str(path), mode="r").attrs["fingerprint"]
    first = aggregate(path).hist(0)                              # cached in this process
    shutil.rmtree(path)
    write_store(path, [new])
    root = zarr.open_group(str(path), mode="r+")
    root.attrs["fingerprint"] = fingerprint                      # the same config
    root.attrs["creation_id"] = "another store"
    again = aggregate(path).hist(0)
    np.testing.assert_array_equal(again, aggregate(path, path=str(tmp_path / "scratch.agg")).hist(0))
    assert not np.array_equal(again, first)
