"""Stacked blocks swept (issue 31): a walk per (sequence, token block) up the swept layers on a
real worker process, against the independent oracle on four families in float64.

The oracle takes each unmodified layer's diagonal blocks J_tt from whole-sequence autograd
(tests/oracle.py) at the layer inputs of transformers' own forward, and multiplies them out:
P_t(l, s) = J^(l+s−1)_tt ⋯ J^(l)_tt. Its eigenvalues, ‖P_t‖_F²/d, the per-span exponents and
the Lyapunov exponents (1/S) ln σ_i of the explicit product P_t(l0, S) (not the walk's frame
update) must equal the store's. Then: the shift mode of a LayerNorm family's stacks, the bad
depth configs, resume, and the refusal to add depth to a finished store.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import zarr
from conftest import local_client
from families import FAMILIES, tolerance
from oracle import layer_input, matched_eigvals_error, oracle_model, sequence_jacobian

from analysis import open_store
from sweep.config.load import ConfigError, config_from_dict
from sweep.errors import StoreMismatch
from sweep.numerics.spectra import eigvals
from sweep.plan.make import make_plan
from sweep.run import run_sweep

# γ from the walk against (1/S) ln σ_i of the oracle's explicit product: as well as J_tt itself
# agrees (LLaMA's fast path 1e-6, the float32 rounding inside Mamba-style layers 2e-5),
# amplified where σ_i is small (relative error ε·σ_1/σ_i). Measured (largest |Δγ| over tokens
# and exponents, the run and every span): LLaMA 3e-7, Mamba 2e-7, Bamba 6e-6, Mamba-2 3.1e-4,
# on its smallest exponent (a direction shrunk by e^-7.9 over the 3 layers)
LYAPUNOV_BOUND = {"llama": 1e-5, "mamba": 1e-5, "mamba2": 5e-4, "bamba": 5e-4}
NAMES = ("llama", "mamba", "mamba2", "bamba")    # attention (GQA), Mamba, Mamba-2, a hybrid
SWEPT = NAMES + ("gpt_neox",)                    # and a LayerNorm family, for the shift mode
N_LAYERS, SEQS, L, SPANS = 3, 2, 6, [2, 3]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    from conftest import _perturb
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("depth")
    out = {}
    for name in SWEPT:
        torch.manual_seed(0)
        config = FAMILIES[name]()
        config.num_hidden_layers = N_LAYERS
        if name == "bamba":
            config.attn_layer_indices = [1]
        model = AutoModelForCausalLM.from_config(config).eval()
        _perturb(model, torch.Generator().manual_seed(1))
        model.save_pretrained(root / name)
        out[name] = root / name
    return out


def _doc(checkpoints, store, names=SWEPT, **extra) -> dict:
    return {"models": [{"path": str(checkpoints[n]), "dtype": "float64", "name": n} for n in names],
            "inputs": {"sequences": SEQS, "length": L, "seed": 3}, "layers": "all",
            "store": str(store), "compute": {"token_block": 4, "live_every": 0},
            "depth": {"spans": SPANS}, **extra}


@pytest.fixture(scope="module")
def worker():
    with local_client(1) as c:
        yield c


@pytest.fixture(scope="module")
def swept(checkpoints, worker, tmp_path_factory):
    cfg = config_from_dict(_doc(checkpoints, tmp_path_factory.mktemp("s") / "run.zarr"))
    result = run_sweep(cfg, client=worker, progress=False)
    assert result.exit_code == 0, result.errors
    return cfg, result


def _oracle_blocks(model, ids) -> list[torch.Tensor]:
    """[(L, d, d) J_tt of layer l] for every layer, from whole-sequence autograd."""
    out = []
    for layer in range(N_LAYERS):
        _, J = sequence_jacobian(model, layer, ids)                             # (L, d, L, d)
        out.append(torch.stack([J[t, :, t, :] for t in range(L)]))
    return out


@pytest.mark.parametrize("name", NAMES)
def test_stacks_and_lyapunov_equal_the_products_of_the_oracle_blocks(checkpoints, swept, name):
    cfg, result = swept
    walks = [r for r in result.results if r.get("model") == name and "walk_layers" in r]
    assert len(walks) == SEQS * 2 and {r["route"] for r in walks} == {"layer-local"}
    assert all(r["walk_layers"] == list(range(N_LAYERS)) for r in walks)
    assert not [r for r in result.results if r.get("model") == name and "layer" in r]
    st = open_store(cfg.store, model=name)
    assert st.depth_spans == SPANS and st.lyapunov_layers == (0, N_LAYERS - 1)
    model = oracle_model(checkpoints[name])
    # J_tt of the LLaMA fast path: float64 rotary tables where transformers' are float32;
    # the Mamba-style families round their decay and state to float32 inside float64 models
    bound = 1e-6 if name == "llama" else tolerance(name, eigenvalues=True)
    d = st.d_model
    for seq in range(SEQS):
        ids = torch.from_numpy(st.tokens(seq))
        blocks = _oracle_blocks(model, ids)
        for layer, diag in enumerate(blocks):
            fro2 = diag.square().sum((1, 2)).numpy()
            np.testing.assert_allclose(st.frobenius2(layer, seq), fro2, rtol=bound)
            assert matched_eigvals_error(st.eigenvalues(layer, seq), eigvals(diag).numpy()) <= bound
        for span in SPANS:
            for start in range(N_LAYERS - span + 1):
                p = blocks[start]
                for layer in range(start + 1, start + span):
                    p = blocks[layer] @ p                                       # (L, d, d)
                err = matched_eigvals_error(st.stack_eigenvalues(start, span, seq), eigvals(p).numpy())
                assert err <= bound, (name, span, start, err)
                gain = p.square().sum((1, 2)).numpy() / d
                np.testing.assert_allclose(st.stack_gain(start, span, seq), gain, rtol=bound)
                want = torch.linalg.svdvals(p).log().numpy() / span
                err = np.abs(st.stack_lyapunov(start, span, seq) - want).max()
                assert err <= LYAPUNOV_BOUND[name], (name, span, start, err)
        full = blocks[0]
        for diag in blocks[1:]:
            full = diag @ full
        want = torch.linalg.svdvals(full).log().numpy() / N_LAYERS
        got = st.lyapunov(seq)
        assert (np.diff(got, axis=1) <= 0).all()                                # largest first
        # Σγ·S = ln|det P| = Σ ln|ζ(P)|, the store's own stack of all S layers
        np.testing.assert_allclose(got.sum(1) * N_LAYERS, np.log(np.abs(
            st.stack_eigenvalues(0, N_LAYERS, seq))).sum(1), atol=1e-10, rtol=0)
        np.testing.assert_allclose(got, want, atol=LYAPUNOV_BOUND[name], rtol=0)


def test_a_layernorm_familys_stacks_lose_their_shift_mode_and_an_rmsnorm_familys_nothing(swept):
    """J𝟙 = 𝟙 at every GPT-NeoX block, so P𝟙 = 𝟙 for every stack: symmetry-removed drops that
    eigenvalue by its eigenvector, leaving none within 1e-5 of 1; LLaMA's stacks (RMSNorm:
    𝟙 is no eigenvector) lose nothing to it."""
    from analysis.spectrum.rates import scale_mask

    cfg, _ = swept
    for name, removed in (("gpt_neox", 1), ("llama", 0)):
        st = open_store(cfg.store, model=name)
        for span in SPANS:
            for start in range(N_LAYERS - span + 1):
                for seq in range(SEQS):
                    zeta = st.stack_eigenvalues(start, span, seq)                # (L, d)
                    mask = scale_mask(zeta, *st.stack_shift_direction(start, span, seq))
                    assert (mask.sum(1) == removed).all(), (name, span, start, seq)
                    near = np.abs(zeta - 1) < 1e-5
                    assert not (near & ~mask).any(), (name, span, start, seq)
                    if removed:
                        assert (near == mask).all()
    # the analysis' symmetry-removed count of NeoX's stacks keeps no per-step rate of such a mode
    from analysis.spectrum.rates import marginal_threshold
    from analysis.studies.depth import _stack_rows, _walked

    for name in ("gpt_neox", "llama"):
        st = open_store(cfg.store, model=name)
        floor = marginal_threshold(st.dtype)
        for span in SPANS:
            rows = _stack_rows(st, span, _walked(st, 0)[1], 0, floor)
            kept, every = rows["symmetry-removed"], rows["all-stable"]
            assert not (kept < 1e-5 / span).any()
            lost = np.isfinite(every) & (every >= floor) & ~np.isfinite(kept)
            assert (lost.sum(1) <= (1 if name == "gpt_neox" else 0)).all(), name


def test_the_stored_residual_is_transformers_layer_input(checkpoints, swept):
    cfg, _ = swept
    g = zarr.open_group(cfg.store, path="mamba", mode="r")
    model = oracle_model(checkpoints["mamba"])
    ids = torch.from_numpy(g["tokens"][1])
    want = layer_input(model, 2, ids).numpy()
    assert np.abs(g["residual"][2, 1] - want).max() <= 1e-12 * np.abs(want).max()


def test_an_interrupted_walk_is_redone_alone(checkpoints, worker, tmp_path, capsys):
    from sweep.cli import main

    cfg = config_from_dict(_doc(checkpoints, tmp_path / "run.zarr", names=("mamba2",)))
    assert run_sweep(cfg, client=worker, progress=False).exit_code == 0
    g = zarr.open_group(cfg.store, path="mamba2", mode="r+")
    before = {k: g[k][...] for k in ("stack_eigenvalues", "lyapunov", "eigenvalues")}
    # killed after its first layer's block: that cell done, the others and the walk pending
    g["depth_ledger"][1, 0] = 0
    g["ledger"][1:, 1, 0] = 0
    g["stack_eigenvalues"][:, :, 1, :4] = complex("nan+nanj")
    assert main(["status", cfg.store]) == 0
    assert "mamba2: 3/4 walks up layers 0..2 done" in capsys.readouterr().out
    again = run_sweep(cfg, client=worker, progress=False, resume=True)
    walks = [r for r in again.results if "walk_layers" in r]
    assert again.exit_code == 0 and [(r["seq"], r["block"], r["blocks"]) for r in walks] == [(1, 0, 2)]
    assert again.planned == 2                      # the progress counts the 2 pending blocks
    for k, want in before.items():
        np.testing.assert_array_equal(g[k][...], want)


def test_adding_depth_to_a_finished_store_says_why_in_one_line(checkpoints, worker, tmp_path):
    doc = _doc(checkpoints, tmp_path / "run.zarr", names=("llama",))
    plain = {k: v for k, v in doc.items() if k != "depth"}
    assert run_sweep(config_from_dict(plain), client=worker, progress=False).exit_code == 0
    with pytest.raises(StoreMismatch) as e:
        run_sweep(config_from_dict(doc), client=worker, progress=False, resume=True)
    assert "\n" not in str(e.value) and "depth" in str(e.value) and "new --store" in str(e.value)


@pytest.mark.parametrize("change, field", [
    ({"layers": [0, 2]}, "layers: depth needs consecutive layers"),
    ({"layers": {0: 6, 1: 4}}, "layers: depth needs the same tokens"),
    ({"depth": {"spans": [2, 4]}}, "depth.spans: span 4 is longer than the 3 swept"),
    ({"depth": {"spans": [1]}}, "depth.spans[0]: a stack spans at least 2"),
    ({"depth": {"spans": ["two"]}}, "depth.spans[0]: expected an integer"),
    ({"depth": {"span": [2]}}, "depth"),
])
def test_bad_depth_configs_are_refused_in_one_line_before_compute(checkpoints, tmp_path, change, field):
    doc = {**_doc(checkpoints, tmp_path / "run.zarr", names=("llama",)), **change}
    with pytest.raises(ConfigError) as e:
        make_plan(config_from_dict(doc))
    assert str(e.value).startswith(field) and "\n" not in str(e.value)
    assert not (tmp_path / "run.zarr").exists()


def test_tdos_analyze_and_compare_show_the_depth_sections(swept, tmp_path):
    import json

    from analysis.cli import compare_main, main

    cfg, _ = swept
    rep = tmp_path / "rep"
    assert main([cfg.store, "--model", "bamba", "--out", str(rep), "--n-boot", "50", "--quiet"]) == 0
    assert "### Depth: stacked blocks over layers 0..2 (3 blocks)" in (rep / "report.md").read_text()
    depth = json.loads((rep / "fits.json").read_text())["models"]["bamba"]["depth"]
    assert depth["spans"] == [1, *SPANS] and depth["n_tokens"] == SEQS * L
    assert len(depth["kernel"]) == N_LAYERS + sum(N_LAYERS - s + 1 for s in SPANS)
    assert (rep / "depth.png").stat().st_size > 20_000
    assert compare_main([f"{cfg.store}:llama", f"{cfg.store}:mamba", "--out",
                         str(tmp_path / "cmp"), "--n-boot", "50"]) == 0
    pairs = json.loads((tmp_path / "cmp" / "compare.json").read_text())["depth"]["pairs"]
    assert {(p["what"], p["span"]) for p in pairs} >= {("beta", 3), ("top_lyapunov", None)}
    fam = json.loads((tmp_path / "cmp" / "compare.json").read_text())["family"]["tests"]
    depth_tests = [t for t in fam if t["name"].startswith(("Δβ", "Δγ₁")) and
                   (": stack of" in t["name"] or ": top Lyapunov" in t["name"])]
    assert len(depth_tests) == len(pairs)               # every depth difference, its own p
    for t in depth_tests:       # from its interval's own law: t over sequences, or replicates
        m = t["p_method"]
        assert m.startswith(("t(", "bootstrap B=")), t
        if m.startswith("bootstrap B="):                # never below what B replicates resolve
            B = int(m.split("=")[1].split()[0])
            assert t["p_raw"] >= 2 / (1 + B), t
    assert any("cumulative fit, all-stable modes" in t["name"] for t in depth_tests)
    assert "Depth curves side by side" in (tmp_path / "cmp" / "compare.md").read_text()
    assert (tmp_path / "cmp" / "compare_depth.png").is_file()