"""The two mode counts ("all-stable", the paper's; "symmetry-removed") against hand counts
and against the store's eigenvalues read directly; full rate ranges."""
from __future__ import annotations

import csv

import numpy as np
import pytest
import zarr
from synthetic_store import SyntheticModel, synthetic_model, write_store

from analysis import aggregate, block_rates, fit_ir_exponent, open_store
from analysis.report.analyze import representative, table_lengths
from analysis.spectrum.decay import effective_spectrum
from analysis.spectrum.observables import tdos_from_rates
from analysis.spectrum.rates import EDGES
from analysis.studies.tables import beta_vs_length
from sweep.format.settings import Settings

WINDOW = (1e-4, 5e-2)
SETTINGS = Settings(window=WINDOW, n_boot=20)
# one token's spectrum, counted by hand: six stable rates, two of them outside the window
# below (λ = 2e-6, the scale mode along h_t) and above (λ = 0.5); |ζ| = 1 exactly; |ζ| > 1; ζ = 0
HAND_RATES = np.array([2e-6, 2.1e-4, 1.1e-3, 3e-3, 2.1e-2, 0.5])   # off the grid edges
HAND_OTHER = np.array([1.0, 1.2j, 0.0])


def _grid():
    return EDGES[(EDGES >= WINDOW[0] * (1 - 1e-9)) & (EDGES <= WINDOW[1] * (1 + 1e-9))]


def _hand_beta(rates_per_token, n_tokens):
    """β from N(<x) = n_tokens · #{λ < x} at the grid points: a plain polyfit."""
    x = _grid()
    n = n_tokens * np.array([(rates_per_token < v).sum() for v in x], float)
    ok = n > 0
    return np.polyfit(np.log10(x[ok]), np.log10(n[ok]), 1)[0] - 1


def _hand_model(nseq=2, lmax=16):
    zeta = np.concatenate([np.exp(-HAND_RATES) * np.exp(1j * 0.1 * np.arange(6)), HAND_OTHER])
    ev = np.broadcast_to(zeta.astype(np.complex128), (1, nseq, lmax, zeta.size)).copy()
    rho = np.full((1, nseq, lmax), np.exp(-2e-6))                  # h_t: the λ = 2e-6 mode
    return SyntheticModel(name="hand", eigenvalues=ev, layers=[3], arch="gpt2", dtype="float64",
                          token_block=8, scale_rayleigh=rho,
                          scale_residual=np.full((1, nseq, lmax), 1e-8))


def test_hand_counted_store_gives_the_all_stable_beta_exactly(tmp_path):
    write_store(tmp_path / "h.zarr", [_hand_model()])
    st = open_store(tmp_path / "h.zarr")
    T = 2 * 16
    al = block_rates(st, 3, modes="all-stable")
    sr = block_rates(st, 3, modes="symmetry-removed")
    assert al.stable.size == 6 * T and (al.unstable, al.zero, al.scale, al.marginal) == (2 * T, T, 0, 0)
    assert sr.stable.size == 5 * T and sr.scale == sr.marginal == T and np.allclose(sr.removed, 2e-6)
    want_all, want_sr = _hand_beta(HAND_RATES, T), _hand_beta(HAND_RATES[1:], T)
    table = beta_vs_length(st, aggregate(tmp_path / "h.zarr").model("hand"), 3, [8, 16],
                           SETTINGS)
    for row in table.rows:
        T_L = 2 * row.L
        np.testing.assert_allclose(row.beta_all_stable, _hand_beta(HAND_RATES, T_L), atol=1e-12)
        np.testing.assert_allclose(row.beta_symmetry_removed, _hand_beta(HAND_RATES[1:], T_L),
                                   atol=1e-12)
        assert row.n_modes_all_stable == row.n_modes_symmetry_removed == 4 * T_L
        # removed: the scale mode (stable, below the window) and the marginal |ζ| = 1
        assert (row.sym_removed, row.sym_stable, row.sym_below, row.sym_inside) == (2 * T_L, T_L, T_L, 0)
    # β does not depend on T when every token is the same: the 16-token row is the same β
    np.testing.assert_allclose(table.rows[-1].beta_all_stable, want_all, atol=1e-12)
    assert want_all < want_sr                   # a mode below the window lowers β


def _with_symmetry_modes(m, k, n_ir, lam=(3e-6, 7e-7)):
    """Replace k UV modes per token (λ > 0.1, outside the window) by stable symmetry modes
    ζ = 1 − lam (below the window), along h_t and (k = 2) along 𝟙/√d, tiny residuals."""
    ev = m.eigenvalues.copy()                                             # (rows, seq, L, d)
    rows, nseq, L, _ = m.shape
    assert (np.abs(ev[..., n_ir:n_ir + k]) < np.exp(-0.1)).all()         # UV modes indeed
    ev[..., n_ir:n_ir + k] = (1 - np.asarray(lam[:k])).astype(ev.dtype)
    m.eigenvalues = ev
    m.scale_rayleigh = np.full((rows, nseq, L), 1 - lam[0])
    m.scale_residual = np.full((rows, nseq, L), 1e-7)
    if k == 2:
        m.shift_rayleigh = np.full((rows, nseq, L), 1 - lam[1])
        m.shift_residual = np.full((rows, nseq, L), 1e-7)
    return m


@pytest.mark.parametrize("k", [1, 2])
def test_stable_symmetry_modes_below_the_window_shift_beta_as_predicted(tmp_path, k):
    # float32: the synthetic marginal ζ ≈ 1 rounds to |ζ| ≥ 1, so only the k modes move
    m = _with_symmetry_modes(synthetic_model(arch="gpt_neox", rows=1, nseq=2, lmax=32, d=40,
                                             n_ir=20, seed=21), k, 20)
    path = write_store(tmp_path / "s.zarr", [m])
    st = open_store(path)
    table = beta_vs_length(st, aggregate(path).model(m.name), 0, [32], SETTINGS)
    row = table.rows[0]
    T = 2 * 32
    assert (row.sym_stable, row.sym_below, row.sym_inside) == (k * T, k * T, 0)
    # prediction: every point of the window gains k·T modes, nothing else changes
    sr = block_rates(st, 0, modes="symmetry-removed").stable
    x = _grid()
    n_pred = np.array([(sr < v).sum() for v in x], float) + k * T
    beta_pred = np.polyfit(np.log10(x), np.log10(n_pred), 1)[0] - 1
    np.testing.assert_allclose(row.beta_all_stable, beta_pred, atol=1e-12)
    np.testing.assert_allclose(row.beta_symmetry_removed, fit_ir_exponent(sr, WINDOW).beta, atol=1e-12)
    assert row.delta_beta < 0 and row.n_modes_all_stable == row.n_modes_symmetry_removed


def test_table1_all_stable_columns_equal_the_direct_fit_on_every_row(tmp_path):
    # layers 1, 5 only (no 24): the representative layer must be one the store holds;
    # the config asks for layer 7 (absent) and non-power-of-two lengths
    m = _with_symmetry_modes(synthetic_model(arch="mamba", rows=2, nseq=2, lmax=24, d=24,
                                             n_ir=12, layers=[1, 5], seed=23), 1, 12)
    path = write_store(tmp_path / "t.zarr", [m])
    zarr.open_group(str(path), mode="r+").attrs["analysis"] = {"lengths": [6, 12, 20], "layer": 7}
    st = open_store(path)
    assert representative(st) == (5, 24) and representative(st, 1) == (1, 24)
    # the path analyze_model takes to table1.csv, without the figures
    lengths = table_lengths(st, 5)
    assert lengths == [6, 12, 20, 24] and table_lengths(st, 5, [8, 16]) == [8, 16, 24]
    assert table_lengths(st, 5, [8, 16], always=12) == [8, 12, 16, 24]   # the figures' L gets a row
    table = beta_vs_length(st, aggregate(path).model(m.name), 5, lengths, SETTINGS)
    with open(table.to_csv(tmp_path / "table1.csv")) as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["L"]) for r in rows] == lengths and {r["layer"] for r in rows} == {"5"}
    for r in rows:
        L = int(r["L"])
        z = np.concatenate([open_store(path).eigenvalues(5, s)[:L] for s in range(2)])
        mod = np.abs(z.astype(np.complex128))
        fit = fit_ir_exponent(-np.log(mod[(mod > 0) & (mod < 1)]), WINDOW)
        assert float(r["beta_all_stable"]) == pytest.approx(fit.beta, abs=1e-12)
        assert int(r["n_modes_all_stable"]) == fit.n_modes
        assert float(r["r2_all_stable"]) == pytest.approx(fit.r2, abs=1e-12)
        assert float(r["ci_lo_all_stable"]) <= float(r["beta_all_stable"]) <= float(r["ci_hi_all_stable"])


def test_rates_beyond_the_old_range_are_binned_or_counted():
    sp = tdos_from_rates([1e-20, 3e-16, 1e-3, 2e4, 5e6, 1e9])
    assert sp.n_modes == 6 and sp.underflow == 1 and sp.overflow == 1
    assert sp.in_range.sum() == 4                       # 3e-16 … 5e6 lie inside the bins
    integral = (sp.density * np.diff(EDGES)).sum()
    assert integral == pytest.approx(4 / 6)             # the outside ones stay in the normalisation
    assert "1 < 1e-17" in sp.outside_note() and "1 ≥ 1e+08" in sp.outside_note()


def test_effective_rates_above_1e4_are_all_in_the_spectrum(tmp_path):
    m = synthetic_model(rows=1, nseq=1, lmax=16, d=24, n_ir=12, seed=25)
    m.a_log[:] = np.log(np.geomspace(1e-5, 3e5, m.a_log[0].size)).reshape(m.a_log.shape[1:])
    path = write_store(tmp_path / "e.zarr", [m])
    sp = effective_spectrum(aggregate(path), 0)
    lam_eff = (m.delta[0, 0][:, :, None] * np.exp(m.a_log[0])[None]).ravel()   # every mode
    assert lam_eff.max() > 1e4 and sp.n_modes == lam_eff.size
    assert sp.in_range.sum() + sp.underflow + sp.overflow == lam_eff.size


def _stand_in(tmp_path, arch, n_layers):
    """A tiny random checkpoint with the paper model's layer count (no download)."""
    import transformers

    cls, cfg = {"mamba": ("MambaForCausalLM", transformers.MambaConfig(
                    vocab_size=64, hidden_size=8, num_hidden_layers=n_layers, state_size=2,
                    time_step_rank=2)),
                "gpt_neox": ("GPTNeoXForCausalLM", transformers.GPTNeoXConfig(
                    vocab_size=64, hidden_size=8, num_hidden_layers=n_layers, num_attention_heads=2,
                    intermediate_size=16))}[arch]
    getattr(transformers, cls)(cfg).save_pretrained(tmp_path / arch)
    return str(tmp_path / arch)


@pytest.mark.parametrize("name,arch,n_layers,layer,lengths", [
    ("mamba370m-paper.yaml", "mamba", 48, 24, [8, 16, 32, 64, 128, 256, 512]),
    ("pythia410m-paper.yaml", "gpt_neox", 24, 12, [8, 16, 24, 28, 32, 64, 128, 256, 512])])
def test_paper_configs_name_layers_that_exist(tmp_path, name, arch, n_layers, layer, lengths):
    import yaml

    from sweep.plan.make import plan_from_dict
    from sweep.store.writer import open_store

    raw = yaml.safe_load(open(f"configs/{name}").read())
    stand_in = _stand_in(tmp_path, arch, n_layers)
    for m in raw.get("models") or [raw["model"]]:
        m["path"] = stand_in
    raw["inputs"] = {k: v for k, v in raw["inputs"].items() if k not in ("text", "tokenizer")}
    raw["store"] = str(tmp_path / "p.zarr")
    plan = plan_from_dict(raw)
    cfg = plan.config
    assert cfg.analysis.layer == layer and list(cfg.analysis.lengths) == lengths
    assert cfg.inputs.sequences >= 4
    swept = {ly: n for m in plan.models for ly, n in m.rows if m.spec.dtype == "float32"}
    assert swept[layer] == max(lengths) and max(swept) < n_layers
    if arch == "mamba":                         # the fp64 rerun: layer 24, its own rows to 128
        assert [(m.spec.dtype, m.rows) for m in plan.models][1] == ("float64", ((24, 128),))
    recorded = dict(open_store(plan).attrs)["analysis"]
    assert {k: recorded[k] for k in ("lengths", "layer")} == {"lengths": lengths, "layer": layer}
    assert recorded["window"] == [1e-4, 5e-2] and recorded["skip_positions"] == "auto"  # defaults
