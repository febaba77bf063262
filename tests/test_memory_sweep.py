"""Token memory swept (issue 32) on a real worker process, against the independent oracle on
four families in float64: whole-sequence autograd of the unmodified layer at transformers'
own layer inputs (tests/oracle.py) gives every block J_{t,s}, and m_t(k) = ‖J_{t,t−k}‖_F².

- `probes: 0` matches the oracle (1e-8 relative; 1e-5 where transformers rounds to float32
  inside float64 models), and m_t(0) is the J_tt sweep's ‖J_tt‖_F²;
- `probes: 64`: the profile averaged over tokens lies within 3 reported standard errors of
  the exact one;
- adding `memory` to a finished sweep computes only the memory, other settings are refused,
  bad values are one line at config load.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import zarr
from conftest import local_client
from families import FAMILIES, tolerance
from oracle import oracle_model, sequence_jacobian

from analysis import open_store
from sweep.config.load import ConfigError, config_from_dict
from sweep.errors import StoreMismatch
from sweep.run import run_sweep

NAMES = ("llama", "mamba", "mamba2", "bamba")    # attention (GQA), Mamba, Mamba-2, a hybrid
SEQS, L, LAGS, EVERY = 2, 8, 5, 3


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    from conftest import _perturb
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("memory")
    out = {}
    for name in NAMES:
        torch.manual_seed(0)
        config = FAMILIES[name]()
        config.num_hidden_layers = 2            # every layer swept: two keep this test's time
        if name == "bamba":
            config.attn_layer_indices = [1]
        model = AutoModelForCausalLM.from_config(config).eval()
        _perturb(model, torch.Generator().manual_seed(1))
        model.save_pretrained(root / name)
        out[name] = root / name
    return out


def _doc(checkpoints, store, names=NAMES, probes=0, memory=True) -> dict:
    doc = {"models": [{"path": str(checkpoints[n]), "dtype": "float64", "name": n} for n in names],
           "inputs": {"sequences": SEQS, "length": L, "seed": 3}, "layers": "all",
           "store": str(store), "compute": {"token_block": 4, "live_every": 0}}
    if memory:
        doc["memory"] = {"lags": LAGS, "probes": probes, "every": EVERY}
    return doc


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


def _oracle_profile(model, layer, ids):
    """(L, LAGS+1) ‖J_{t,t−k}‖_F² of every token, NaN where t − k < 0."""
    _, J = sequence_jacobian(model, layer, ids)                                 # (L, d, L, d)
    out = np.full((L, LAGS + 1), np.nan)
    for t in range(L):
        for k in range(min(LAGS, t) + 1):
            out[t, k] = float(J[t, :, t - k, :].square().sum())
    return out


@pytest.mark.parametrize("name", NAMES)
def test_exact_profiles_equal_the_oracle_blocks(checkpoints, swept, name):
    cfg, result = swept
    tasks = [r for r in result.results if r.get("model") == name and "memory_layer" in r]
    assert len(tasks) == 2 * SEQS and {r["route"] for r in tasks} == {"layer-local"}
    st = open_store(cfg.store, model=name)
    assert st.memory_meta == {"lags": LAGS, "probes": 0, "every": EVERY, "estimator": "exact"}
    model = oracle_model(checkpoints[name])
    bound = 1e-8 if tolerance(name) == 1e-8 else 1e-5
    sampled = np.arange(0, L, EVERY)
    for layer in st.layers:
        for seq in range(SEQS):
            got = st.memory(layer, seq)                                         # (L, LAGS+1)
            want = _oracle_profile(model, layer, torch.from_numpy(st.tokens(seq)))
            assert np.isnan(np.delete(got, sampled, axis=0)).all()             # unsampled rows
            np.testing.assert_allclose(got[sampled], want[sampled], rtol=bound, atol=0)
            assert np.isnan(got[0, 1:]).all() and np.isfinite(got[6, :]).all()
            # k = 0 is ‖J_tt‖_F², which the J_tt sweep stores beside the eigenvalues
            np.testing.assert_allclose(got[sampled, 0], st.frobenius2(layer, seq)[sampled],
                                       rtol=1e-5 if name == "llama" else bound)
            assert (st.memory_stderr(layer, seq)[sampled][np.isfinite(got[sampled])] == 0).all()


def test_hutchinson_is_within_its_standard_error_of_the_exact_profile(checkpoints, swept, worker,
                                                                       tmp_path):
    cfg, _ = swept
    exact = open_store(cfg.store, model="mamba2")
    est = config_from_dict(_doc(checkpoints, tmp_path / "h.zarr", names=("mamba2",), probes=64))
    assert run_sweep(est, client=worker, progress=False).exit_code == 0
    st = open_store(est.store, model="mamba2")
    assert st.memory_meta["estimator"] == "hutchinson (64 Rademacher probes)"
    for layer in st.layers:
        got = np.stack([st.memory(layer, q) for q in range(SEQS)])             # (S, L, K+1)
        se = np.stack([st.memory_stderr(layer, q) for q in range(SEQS)])
        want = np.stack([exact.memory(layer, q) for q in range(SEQS)])
        for k in range(LAGS + 1):
            ok = np.isfinite(want[..., k])
            n = ok.sum()
            mean_got, mean_want = got[..., k][ok].mean(), want[..., k][ok].mean()
            se_mean = np.sqrt((se[..., k][ok] ** 2).sum()) / n
            assert abs(mean_got - mean_want) <= 3 * se_mean, (layer, k, mean_got, mean_want, se_mean)
            assert se_mean > 0


@pytest.mark.parametrize("name", ["llama", "mamba2"])
def test_batched_cotangents_give_what_one_at_a_time_gives(checkpoints, name):
    """The accelerator's batched backward (is_grads_batched) against the CPU's one cotangent
    per backward, exact and Hutchinson (the same Rademacher draws)."""
    from transformers import AutoModelForCausalLM

    from sweep.generic.selfcheck import whole_sequence_call
    from sweep.numerics.memory import lag_profile

    model = AutoModelForCausalLM.from_pretrained(checkpoints[name], dtype=torch.float64).eval()
    call = whole_sequence_call(model, 1, torch.arange(L) % model.config.vocab_size)
    # Mamba-2's layer rounds to float32 inside a float64 model: the two routes' float32
    # roundings differ there (measured 6e-9 relative)
    rtol = 1e-12 if name == "llama" else 1e-6
    for probes in (0, 3):
        one = lag_profile(call, [2, 5, 7], LAGS, probes, seed=4, rows=1)
        many = lag_profile(call, [2, 5, 7], LAGS, probes, seed=4, rows=5)
        for a, b in zip(one, many):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=rtol, atol=0)


def test_mamba1_goes_through_transformers_parallel_scan_and_the_layer_is_restored(checkpoints):
    """sweep/numerics/memory.py builds a Mamba-1 layer's graph on mamba.py's scan (transformers'
    `use_mambapy`; its O(L) backward), only while it builds it (the oracle test above holds
    the values to the unmodified sequential layer)."""
    from transformers import AutoModelForCausalLM

    from sweep.generic.selfcheck import whole_sequence_call
    from sweep.numerics.memory import lag_profile

    model = AutoModelForCausalLM.from_pretrained(checkpoints["mamba"], dtype=torch.float64).eval()
    mixer = model.backbone.layers[1].mixer
    seen = []
    mixer.register_forward_pre_hook(lambda module, args: seen.append(module.use_mambapy))
    call = whole_sequence_call(model, 1, torch.arange(L) % model.config.vocab_size)
    seen.clear()
    lag_profile(call, [L - 1], LAGS, 2)
    assert seen == [True] and mixer.use_mambapy is False


def test_adding_memory_to_a_finished_sweep_computes_only_the_memory(checkpoints, worker, tmp_path,
                                                                    capsys):
    from sweep.cli import main

    plain = config_from_dict(_doc(checkpoints, tmp_path / "run.zarr", names=("llama",), memory=False))
    assert run_sweep(plain, client=worker, progress=False).exit_code == 0
    g = zarr.open_group(plain.store, path="llama", mode="r")
    before = g["eigenvalues"][...]
    cfg = config_from_dict(_doc(checkpoints, tmp_path / "run.zarr", names=("llama",)))
    again = run_sweep(cfg, client=worker, progress=False, resume=True)
    assert again.exit_code == 0 and again.planned == 0
    kinds = {tuple(sorted(k for k in ("memory_layer", "layer", "residual_seqs") if k in r))
             for r in again.results if "software" in r}
    assert kinds == {("memory_layer",)}                       # no block, no residual stream
    np.testing.assert_array_equal(g["eigenvalues"][...], before)
    assert np.isfinite(open_store(cfg.store, model="llama").memory(1, 1)[6]).all()
    zarr.open_group(cfg.store, path="llama", mode="r+")["memory_ledger"][0, 1] = 0
    assert main(["status", cfg.store]) == 0
    assert (f"llama: 3/4 token-memory profiles done (lags 0..{LAGS}, exact, output tokens t = 0, "
            f"{EVERY}, {2 * EVERY}, ...;") in capsys.readouterr().out
    redo = run_sweep(cfg, client=worker, progress=False, resume=True)
    assert [(r["memory_layer"], r["seq"]) for r in redo.results if "memory_layer" in r] == [(0, 1)]
    other = config_from_dict(_doc(checkpoints, tmp_path / "run.zarr", names=("llama",), probes=8))
    with pytest.raises(StoreMismatch) as e:
        run_sweep(other, client=worker, progress=False, resume=True)
    assert "\n" not in str(e.value) and "memory.probes: 0 -> 8" in str(e.value)


@pytest.mark.parametrize("memory, field", [
    ({"lags": L}, "memory.lags: 8 lags need 0 <= lags < inputs.length (8)"),
    ({"lags": LAGS, "probes": -1}, "memory.probes: must be >= 0"),
    ({"lags": LAGS, "every": 0}, "memory.every: must be >= 1"),
    ({"lag": 3}, "memory"),
])
def test_bad_memory_configs_are_one_line_at_load(checkpoints, tmp_path, memory, field):
    doc = {**_doc(checkpoints, tmp_path / "run.zarr", names=("llama",)), "memory": memory}
    with pytest.raises(ConfigError) as e:
        config_from_dict(doc)
    assert str(e.value).startswith(field) and "\n" not in str(e.value)


def test_tdos_analyze_and_compare_show_the_memory_sections(swept, tmp_path):
    import json

    from analysis.cli import compare_main, main

    cfg, _ = swept
    rep = tmp_path / "rep"
    assert main([cfg.store, "--model", "mamba", "--out", str(rep), "--n-boot", "50", "--quiet",
                 "--memory-window", "1", str(LAGS)]) == 0
    md = (rep / "report.md").read_text()
    assert f"### Token memory (exact, lags 0..{LAGS}, output tokens t = 0, {EVERY}, {2 * EVERY}, …)" in md
    assert "K_A²(k)" in md                                 # Mamba layers: the intrinsic kernel
    mem = json.loads((rep / "fits.json").read_text())["models"]["mamba"]["memory"]
    assert mem["settings"]["lags"] == LAGS and set(mem["layers"]) == {"0", "1"}
    one = mem["layers"]["0"]
    assert one["window"] == [1, LAGS] and one["preferred"] in one["laws"]
    assert set(one["laws"]) == {"exponential", "power law"}   # 5 lags: too few for a break
    assert one["profile"][0] == 1.0 and len(one["intrinsic_K_A_squared"]) == LAGS + 1
    # the sweep recorded the Mamba layers' convolution width (conv_kernel 4) and the LLaMA's none
    assert one["conv_width"] == 4
    assert open_store(cfg.store, "llama").conv_width(0) == 0
    assert (rep / "memory.png").stat().st_size > 20_000
    assert compare_main([f"{cfg.store}:llama", f"{cfg.store}:mamba", "--out",
                         str(tmp_path / "cmp"), "--n-boot", "50"]) == 0
    pairs = json.loads((tmp_path / "cmp" / "compare.json").read_text())["memory"]["pairs"]
    assert len(pairs) == 1 and pairs[0]["what"] in ("alpha", "xi", "alpha_2", None)
    assert pairs[0]["verdict"] == "differ" or pairs[0]["verdict"].startswith(
        ("no difference shown", "CI excludes 0", "laws differ", "neither law fits"))
    assert (pairs[0]["what"] is None) == pairs[0]["verdict"].startswith(("laws", "neither"))
    assert "Token memory side by side" in (tmp_path / "cmp" / "compare.md").read_text()
    assert (tmp_path / "cmp" / "compare_memory.png").is_file()


def test_the_budget_counts_the_memory_arrays_and_bounds_the_kept_graph(checkpoints, tmp_path):
    """`tdos sweep --dry-run`'s store bytes grow by exactly the two memory arrays, and its
    worker estimate of the kept whole-sequence graph is at least what autograd saves."""
    from transformers import AutoModelForCausalLM

    from sweep.budget import GRAPH_PER_TOKEN, size_sweep
    from sweep.generic.selfcheck import whole_sequence_call
    from sweep.numerics.memory import _graph
    from sweep.plan.make import make_plan

    with_memory = make_plan(config_from_dict(_doc(checkpoints, tmp_path / "a.zarr")))
    without = make_plan(config_from_dict(_doc(checkpoints, tmp_path / "b.zarr", memory=False)))
    arrays = sum(2 * len(m.rows) * SEQS * L * (LAGS + 1) * 8 for m in with_memory.models)
    budget = size_sweep(with_memory, workers=1)
    assert budget.store_bytes - size_sweep(without, workers=1).store_bytes == arrays
    assert "memory task" in budget.worker_parts
    for m in with_memory.models:
        model = AutoModelForCausalLM.from_pretrained(checkpoints[m.name], dtype=torch.float64).eval()
        call = whole_sequence_call(model, 1, torch.arange(L) % model.config.vocab_size)
        saved = _graph(call)[2]
        estimate = L * GRAPH_PER_TOKEN * m.info.block_params // m.info.d_model * 8
        assert saved <= estimate, (m.name, saved, estimate)
