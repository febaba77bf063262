"""End to end: a three-model sweep (HF Mamba, GPT-2, mamba_ssm-format Mamba) on two real
worker processes lands in the store with the values a direct computation gives."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr
from oracle import layer_input
from scipy.optimize import linear_sum_assignment

from analysis import aggregate, open_store
from analysis.fit.enough import MINIMUMS
from sweep.cli import main
from sweep.config.load import config_from_dict
from sweep.numerics import linalg
from sweep.numerics.spectra import eigvals, scale_direction, shift_direction
from sweep.plan.make import make_plan
from sweep.run import run_sweep
from sweep.worker.model import load_model

L, B, SEQS = 8, 4, 2
TOL = {"float32": dict(rtol=1e-4, atol=1e-5), "float64": dict(rtol=1e-10, atol=1e-12)}


@pytest.fixture(scope="module")
def swept(tiny_checkpoints, tmp_path_factory, client):
    store = tmp_path_factory.mktemp("e2e") / "run.zarr"
    cfg = config_from_dict({
        "models": [{"path": str(tiny_checkpoints["mamba"]), "dtype": "float64"},
                   {"path": str(tiny_checkpoints["gpt2"])},
                   {"path": str(tiny_checkpoints["mamba_ssm"]), "layers": {0: L, 2: 6}}],
        "inputs": {"sequences": SEQS, "length": L, "seed": 3},
        "layers": [0, 1], "store": str(store), "compute": {"token_block": B, "live_every": 2}})
    return cfg, run_sweep(cfg, client=client, progress=False)


def test_sweep_completes(swept, client):
    cfg, result = swept
    # blocks per sequence: 2 layers x 2 blocks for each model (mamba_ssm layer 2: 6 tokens)
    assert (result.exit_code, result.errors, result.interrupted) == (0, [], False)
    assert result.planned == result.total == result.done == SEQS * 3 * 2 * 2
    blocks = [(r["model"], r["layer"], r["seq"], r["block"]) for r in result.results if "block" in r]
    assert len(blocks) == len(set(blocks)) == result.planned
    a_log = sorted(r["model"] for r in result.results if "a_log_layers" in r)
    assert a_log == ["mamba-float64", "mamba_ssm"]
    assert {r["pid"] for r in result.results} <= set(client.run(os.getpid).values())
    assert os.path.isfile(cfg.store + ".live.png")       # analysis.views.live drew the final state
    assert all(set(r["seconds"]) == {"load", "hidden", "jacobian", "eig", "write"}
               for r in result.results if "block" in r)
    assert {r["jacobian_path"] for r in result.results if "block" in r} == {"hand-written"}
    # workers run one BLAS thread, so compute.cpu_linalg auto follows the vendor table there
    expected = linalg.describe(linalg.resolve("auto", threads=1))
    assert {r["linalg"] for r in result.results if "block" in r} == {expected}


def _worker_numerics() -> tuple:
    import torch

    return (torch.__version__, torch.version.cuda, torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32)


@pytest.mark.parametrize("name,dtype", [("mamba-float64", "float64"), ("gpt2", "float32")])
def test_store_records_numerics_provenance(swept, client, name, dtype):
    """torch and CUDA versions of the client and of every worker, TF32 off on every worker,
    and per block the eigensolver that ran it (as the task reported it)."""
    cfg, result = swept
    st = open_store(cfg.store, model=name)
    assert (st.software["torch"], st.software["cuda"]) == (torch.__version__, torch.version.cuda)
    workers = client.run(_worker_numerics)
    assert set(workers.values()) == {(torch.__version__, torch.version.cuda, False, False)}
    assert [(w["torch"], w["cuda"]) for w in st.worker_software] == [(torch.__version__, torch.version.cuda)]
    lib = linalg.resolve("auto", threads=1)["eig64" if dtype == "float64" else "eig32"]
    want = {"torch": "torch-cpu", "openblas": "scipy-openblas"}[lib]
    for r in result.results:
        if r.get("model") == name and "block" in r:
            assert r["eig_backend"] == want
            assert st.eig_backend(r["layer"])[r["seq"], r["block"]] == want
    assert all((st.eig_backend(layer) == want).all() for layer in st.layers)


@pytest.mark.parametrize("name,arch", [("mamba-float64", "mamba"), ("gpt2", "gpt2"),
                                       ("mamba_ssm", "mamba_ssm")])
def test_values_equal_direct_computation(swept, tiny_checkpoints, name, arch):
    cfg, _ = swept
    spec = next(m for m in make_plan(cfg).models if m.name == name)
    st = open_store(cfg.store, model=name)
    model = load_model(tiny_checkpoints[arch], dtype=spec.spec.dtype)
    tol = TOL[spec.spec.dtype]
    n_ctx = max(n for _, n in spec.rows)
    assert st.layers == [layer for layer, _ in spec.rows]
    assert spec.engine == "fast"                # these three keep a hand-written block
    for layer, n in spec.rows:
        block = model.block(layer)
        assert (st.jacobian_path(layer) == "hand-written").all()
        for seq in range(SEQS):
            tokens = torch.from_numpy(np.asarray(st.tokens(seq)))
            assert tokens.shape == (L,)
            h = layer_input(model.hf, layer, tokens[:n_ctx])               # (n_ctx, d)
            jac = block.jacobians(h, 0, n)                                 # (n, d, d)
            want = eigvals(jac).numpy()                                    # (n, d)
            got = st.eigenvalues(layer, seq)
            assert got.shape == (n, model.d_model)
            _assert_same_spectra(got, want, tol)
            for stored, direct in zip(st.scale_direction(layer, seq), scale_direction(jac, h[:n])):
                np.testing.assert_allclose(stored, direct.numpy(), **tol)   # ρ (n,), r (n,)
            for stored, direct in zip(st.shift_direction(layer, seq), shift_direction(jac)):
                np.testing.assert_allclose(stored, direct.numpy(), **tol)   # along 𝟙/√d
            np.testing.assert_allclose(st.frobenius2(layer, seq),
                                       jac.double().square().sum((1, 2)).numpy(), **tol)
            if model.arch == "mamba":
                np.testing.assert_allclose(st.delta(layer, seq), block.delta(h, 0, n).numpy(), **tol)
    if model.arch == "mamba":
        for layer in range(model.n_layers):         # A_log of every layer, swept or not
            want = torch.exp(model.hf.backbone.layers[layer].mixer.A_log).numpy().ravel()
            np.testing.assert_allclose(st.intrinsic_rates(layer), want, **tol)


def _assert_same_spectra(got, want, tol):
    """(n, d) complex each: per token the same eigenvalues within tol, in any order.

    LAPACK's output order is not a property of the spectrum: in fp32 the worker (1 BLAS
    thread) and this process round J_tt differently enough to swap close eigenvalues.
    """
    for row_got, row_want in zip(got, want):
        rows, cols = linear_sum_assignment(np.abs(row_got[:, None] - row_want[None, :]))
        np.testing.assert_allclose(row_got[rows], row_want[cols], **tol)


@pytest.mark.parametrize("name", ["mamba-float64", "gpt2", "mamba_ssm"])
def test_norm_invariant_directions_are_found(swept, name):
    cfg, _ = swept
    st = open_store(cfg.store, model=name)
    agg = aggregate(cfg.store).model(name)
    for layer in st.layers:
        for seq in range(SEQS):
            rho, r = st.scale_direction(layer, seq)                      # (n,), (n,)
            zeta = st.eigenvalues(layer, seq)                            # (n, d)
            assert np.isfinite(rho).all() and np.isfinite(r).all()
            rho_u, r_u = st.shift_direction(layer, seq)                  # along 𝟙/√d
            if st.arch == "gpt2":
                # pre-LN blocks are exactly shift equivariant: J𝟙 = 𝟙 (fp32 rounding only)
                assert r_u.max() < 1e-4 and np.abs(rho_u - 1).max() < 1e-4
                assert np.abs(zeta - rho_u[:, None]).min(1).max() < 1e-4
            else:
                assert r_u.min() > 0.05                                  # RMSNorm: no shift mode
            if st.arch == "mamba":
                # h + mixer(RMSNorm h): J h = h + O(eps/ms(h)), measured r ≤ 4e-4 here;
                # Bauer–Fike: an eigenvalue within κ·r of ρ (measured ≤ 3.2e-3: J is not normal)
                assert r.max() < 1e-2
                assert np.abs(zeta - rho[:, None]).min(1).max() < 1e-2
        sp = agg.special(layer, modes="symmetry-removed")
        # exactly one per token, none left marginal: Mamba the scale direction (RMSNorm),
        # sequential GPT-2 the shift direction (its r along h_t is large)
        assert sp["scale"] == SEQS * st.layer_length[layer] and sp["marginal"] == 0
        assert sp["tokens"] == SEQS * st.layer_length[layer]     # partial last blocks included


def test_xarray_sees_named_dimensions(swept):
    cfg, _ = swept
    ds = xr.open_zarr(cfg.store, group="mamba-float64", consolidated=False)
    assert ds["eigenvalues"].dims == ("layer", "seq", "token", "mode")
    assert ds["eigenvalues"].dtype == np.complex128
    assert ds["delta"].dims == ("layer", "seq", "token", "channel")
    assert ds["a_log"].dims == ("model_layer", "channel", "state")
    assert ds["scale_rayleigh"].dims == ds["scale_residual"].dims == ("layer", "seq", "token")
    assert ds["shift_rayleigh"].dims == ds["shift_residual"].dims == ("layer", "seq", "token")
    assert ds["jacobian_path"].dims == ("layer", "seq", "block")
    assert ds["residual"].dims == ("layer", "seq", "token", "hidden")
    assert ds["residual"].dtype == np.float64 and ds["residual_ledger"].dims == ("layer", "seq")
    assert dict(ds.sizes) == {"layer": 2, "seq": SEQS, "token": L, "mode": 16, "channel": 32,
                              "block": 2, "model_layer": 3, "state": 4, "hidden": 16}


def test_rerun_plans_nothing_and_status_reports_done(swept, client, capsys):
    cfg, _ = swept
    again = run_sweep(cfg, client=client, progress=False, resume=True)
    assert (again.exit_code, again.planned, again.results) == (0, 0, [])
    capsys.readouterr()
    assert main(["status", cfg.store]) == 0
    lines = capsys.readouterr().out.splitlines()
    # L is tokens per sequence; "tokens" means done token positions, in the spectral table only
    assert lines[0].split() == ["model", "layer", "done", "flagged", "total", "L", "h_l",
                                "dtype", "kind"]
    rows = [line.split() for line in lines[1:-1]]
    assert rows == [["mamba-float64", "0", "4", "0", "4", "8", "2/2", "float64", "mamba"],
                    ["mamba-float64", "1", "4", "0", "4", "8", "2/2", "float64", "mamba"],
                    ["gpt2", "0", "4", "0", "4", "8", "2/2", "float32", "attention"],
                    ["gpt2", "1", "4", "0", "4", "8", "2/2", "float32", "attention"],
                    ["mamba_ssm", "0", "4", "0", "4", "8", "2/2", "float32", "mamba"],
                    ["mamba_ssm", "2", "4", "0", "4", "6", "2/2", "float32", "mamba"]]
    assert lines[-1].startswith("done counts flagged blocks (done, with a non-finite value) too; L: "
                                "tokens per sequence swept at the layer; h_l:")


def test_report_headline_is_st_beta_and_the_status_number(swept, tmp_path, capsys):
    """One β: the report's headline (fits.json), `st.beta(layer, L)` and the status table give
    the same primary β, interval, unit, GOF p and mode count for the representative layer."""
    from analysis.cli import main as analyze_main

    cfg, _ = swept
    models, printed = {}, {}
    for name in open_store(cfg.store).models:     # one by one: their layers share no length L
        rep = tmp_path / name
        assert analyze_main([cfg.store, "--model", name, "--out", str(rep)]) == 0
        printed[name] = capsys.readouterr().out
        models[name] = json.loads((rep / "fits.json").read_text())["models"][name]
    assert main(["status", cfg.store, "--spectra"]) == 0
    status = capsys.readouterr().out
    fitted = 0
    for name, doc in models.items():
        want = doc["primary"]["headline"]
        h = open_store(cfg.store, name).beta(doc["layer"], doc["L"])
        assert (h.estimator, h.modes) == (doc["primary"]["estimator"], doc["primary"]["modes"])
        assert (h.layer, h.L, h.unit, h.n_modes) == (want["layer"], want["L"], want["unit"],
                                                     want["n_modes"])
        for got, ref in ((h.beta, want["beta"]), (h.gof_p, want["gof_p"]),
                         *zip(h.ci, want["ci"])):
            assert (ref is None and not np.isfinite(got)) or got == ref, (name, got, ref)
        if h.fitted:
            fitted += 1
            line = next(ln for ln in status.splitlines()
                        if ln.startswith(f"{name} ") and ln.split()[1] == str(h.layer)
                        and " of " in ln)                    # the spectral table's row
            assert f"{h.beta:+.3f} [{h.ci[0]:+.3f},{h.ci[1]:+.3f}]" in line
            assert printed[name].startswith(f"{name} (headline, {h.name})") and h.value() in printed[name]
    assert fitted
    # the README's Python block, run on this store (its path, and L of this store's report),
    # prints the headline of the store's first model at its last layer
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    code = re.search(r"Reading the store from Python:\n\n```python\n(.*?)```", readme, re.S).group(1)
    first = next(iter(models))
    want = models[first]["primary"]["headline"]
    assert models[first]["layer"] == open_store(cfg.store).layers[-1]
    exec(code.replace('"out/tiny.zarr"', repr(cfg.store)).replace("L=32", f"L={want['L']}"), {})
    shown = capsys.readouterr().out
    if want["n_modes"] >= MINIMUMS["beta"].needs:
        assert f"{want['beta']:+.3f} [{want['ci'][0]:+.3f}, {want['ci'][1]:+.3f}]" in shown, shown
    else:       # a tiny store: the same β said as what it is, with no number to read as a result
        assert (f"not enough data (n = {want['n_modes']} stable modes in the window, needs "
                f"{MINIMUMS['beta'].needs})") in shown, shown
