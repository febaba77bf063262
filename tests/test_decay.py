"""The intrinsic and effective rates of gated delta-rule layers (kind `deltanet`).

OLMo-Hybrid, Kimi-Linear and Qwen3-Next carry A_log and dt_bias like Mamba-2: their layer
hands its kernel the log decay g_t = −exp(A_log)·softplus(a_t + dt_bias) (per head; per key
channel of each head for Kimi-Linear), and the recurrent state is multiplied by exp(g_t).
tdos stores exp(A_log) as the intrinsic rates and Δ_t = −g_t / exp(A_log), so that the
effective rate Δ_t·exp(A_log) is transformers' own −g_t. Each is checked against captures
made independently of the code under test, on the whole-sequence forward of transformers'
model (no cache, so the chunked kernel, not the decode step the sweep records):
- the g the layer hands its chunked kernel (tests/oracle.py `gate_rates`), every token;
- a forward hook on the gate's own computation: Kimi-Linear's `forget_gate` module returns
  g; OLMo-Hybrid's gate is a line of its forward, so the hook is on its input projection
  a_proj and the test writes the formula read from that line;
- A_log as the checkpoint's safetensors file holds it.
The checkpoints have four layers with delta-rule layers at 0 and 2, so the sweep's
layer-local worker (one layer resident, stand-ins before it) is exercised at depth.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformers as T
from conftest import local_client
from families import _ATT, _IDS, FAMILIES, tolerance
from oracle import gate_rates, oracle_model

from analysis import open_store
from sweep.config.load import config_from_dict
from sweep.format.schema import StoreError
from sweep.plan.layers import decoder_layers, layer_kinds
from sweep.run import run_sweep

LINEAR = ["linear_attention", "full_attention"] * 2
SWEPT, SEQS, L = [0, 2], 2, 7


def _qwen3_next():
    return T.Qwen3NextConfig(**{**_ATT, "num_hidden_layers": 4}, **_IDS, head_dim=8,
                             layer_types=LINEAR, linear_num_key_heads=2,
                             linear_num_value_heads=4, linear_key_head_dim=8,
                             linear_value_head_dim=8, mlp_only_layers=[0, 1, 2, 3])


# swept through the CLI; Kimi-Linear only where the installed transformers has it (families.NEWER)
SWEPT_MODELS = [n for n in ("olmo_hybrid", "kimi_linear") if n in FAMILIES]
CONFIGS = {**{n: FAMILIES[n] for n in SWEPT_MODELS}, "qwen3_next": _qwen3_next}
# what each layer's decay is: (heads, Δ_t's width)
SHAPES = {"olmo_hybrid": (2, 2), "kimi_linear": (4, 32), "qwen3_next": (4, 4)}


def _save(name, root):
    from conftest import _perturb

    torch.manual_seed(0)
    config = CONFIGS[name]()
    config.num_hidden_layers, config.layer_types = 4, LINEAR
    if name == "kimi_linear":
        config.mlp_layer_types = ["dense", "sparse"] * 2
    model = T.AutoModelForCausalLM.from_config(config).eval()
    _perturb(model, torch.Generator().manual_seed(2))
    model.save_pretrained(root / name)
    return root / name


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("decay")
    return {name: _save(name, root) for name in CONFIGS}


def _hooked_gate(model, layer: int, ids: torch.Tensor) -> torch.Tensor:
    """(L, channels) −g_t from hooks on the gate's computation in model(ids): Kimi-Linear's
    `forget_gate` module returns g (1, L, H, K); OLMo-Hybrid and Qwen3-Next compute
    g = −exp(A_log)·softplus(a + dt_bias) in a line of their forward (both read here), from a
    taken by OLMo-Hybrid's a_proj and by Qwen3-Next's fix_query_key_value_ordering (last)."""
    block = decoder_layers(model)[layer]
    owner = next(m for m in block.modules() if isinstance(getattr(m, "A_log", None), torch.nn.Parameter))
    seen = []

    def rate(a):
        seen.append(owner.A_log.float().exp() * F.softplus(a[0].float() + owner.dt_bias))

    if not hasattr(owner, "a_proj") and not hasattr(owner, "fix_query_key_value_ordering"):
        undo = owner.register_forward_hook(lambda m, args, g: seen.append(-g[0].flatten(1))).remove
    elif hasattr(owner, "a_proj"):
        undo = owner.a_proj.register_forward_hook(lambda m, args, a: rate(a)).remove
    else:
        split = owner.fix_query_key_value_ordering

        def hooked(*args):
            out = split(*args)
            rate(out[-1])
            return out
        owner.fix_query_key_value_ordering = hooked
        undo = lambda: delattr(owner, "fix_query_key_value_ordering")  # noqa: E731
    try:
        with torch.no_grad():
            model(ids[None], use_cache=False)
    finally:
        undo()
    return seen[0].detach()


def _relative(a, b) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_plan_names_the_decay_of_each_delta_rule_layer(checkpoints, name):
    model = T.AutoModelForCausalLM.from_pretrained(checkpoints[name])
    heads, width = SHAPES[name]
    kinds = layer_kinds(model)
    for layer in SWEPT:
        assert kinds[layer].kind == "deltanet" and kinds[layer].ssm == "deltanet"
        assert (kinds[layer].a_log_shape, kinds[layer].delta_channels) == ((heads,), width)
    assert not kinds[1].ssm and kinds[1].kind.startswith("attention")


@pytest.mark.parametrize("name", ["qwen3_next"])
def test_decode_step_records_the_gate_of_transformers_own_layer(checkpoints, name):
    """The generic path's Δ_t on the whole-model route (a prefill of 3 tokens, then decode
    steps), times exp(A_log), equals the gate captured from the whole-sequence forward at
    every token. (OLMo-Hybrid and Kimi-Linear: the same through the sweep below, and
    tests/test_families.py's generic-path test against `scan_deltas`.)"""
    from sweep.worker.model import load_model

    ours, ref = load_model(checkpoints[name], dtype="float64"), oracle_model(checkpoints[name])
    ids = torch.randint(0, ours.vocab_size, (L,), generator=torch.Generator().manual_seed(4))
    for layer in SWEPT:
        engine = ours.jacobians(layer)
        delta = torch.cat([engine.run(ids, 0, 3).delta, engine.run(ids, 3, L).delta])  # (L, c)
        heads = torch.exp(ours.a_log(layer))                                          # (H,)
        rate = delta * heads.repeat_interleave(delta.shape[1] // heads.shape[0])
        assert rate.shape == (L, SHAPES[name][1])
        # the hidden input of layer 2 carries transformers' float32 rounding (the families' bound)
        assert _relative(rate, gate_rates(ref, layer, ids)) <= tolerance("olmo_hybrid")
        assert _relative(rate, _hooked_gate(ref, layer, ids)) <= tolerance("olmo_hybrid")


@pytest.fixture(scope="module")
def swept(checkpoints, tmp_path_factory):
    doc = {"models": [{"path": str(checkpoints[n]), "name": n, "dtype": "float64"}
                      for n in SWEPT_MODELS],
           "inputs": {"sequences": SEQS, "length": L, "seed": 6}, "layers": SWEPT,
           "store": str(tmp_path_factory.mktemp("s") / "run.zarr"),
           "compute": {"token_block": 4, "live_every": 0}}
    with local_client(1) as client:
        result = run_sweep(config_from_dict(doc), client=client, progress=False)
    assert result.exit_code == 0, result.errors
    return doc["store"], result


@pytest.mark.parametrize("name", SWEPT_MODELS)
def test_the_store_holds_intrinsic_and_effective_rates(checkpoints, swept, name):
    """Layer-local workers: exp(A_log) of the checkpoint's file, bit for bit; Δ_t·exp(A_log)
    equal to the gate hooked in transformers' whole-sequence forward, every token."""
    from safetensors.numpy import load_file

    store, result = swept
    assert {r["route"] for r in result.results if r.get("model") == name and "route" in r} \
        == {"layer-local"}
    st, ref = open_store(store, model=name), oracle_model(checkpoints[name])
    weights = load_file(str(checkpoints[name] / "model.safetensors"))
    heads, width = SHAPES[name]
    for layer in SWEPT:
        a_log = next(v for k, v in weights.items() if f"layers.{layer}." in k and k.endswith("A_log"))
        assert st.layer_kind(layer) == "deltanet" and st.delta_channels(layer) == width
        np.testing.assert_array_equal(st.intrinsic_rates(layer),
                                      np.exp(a_log.astype(np.float64)).ravel())
        for seq in range(SEQS):
            ids = torch.from_numpy(np.asarray(st.tokens(seq)))
            eff = st.effective_rates(layer, seq)                                   # (L, c)
            assert eff.shape == (L, width) and st.delta(layer, seq).shape == (L, width)
            np.testing.assert_allclose(eff, _hooked_gate(ref, layer, ids).numpy(),
                                       rtol=tolerance("olmo_hybrid"), atol=0)
    assert st.ssm_layers == [0, 2]
    with pytest.raises(StoreError, match=r"layer 1 \(attention.*no a_log: only layers with a "
                                         r"learned decay \(mamba, mamba2, deltanet; here layers \[0, 2\]"):
        st.intrinsic_rates(1)


def test_the_report_draws_the_delta_rule_layer(swept, tmp_path):
    """Figs 2–4 and the report's sentence on the intrinsic and effective rates."""
    import json

    from analysis.cli import main

    store, _ = swept
    assert main([store, "--out", str(tmp_path), "--n-boot", "20", "--quiet"]) == 0
    report = (tmp_path / "report.md").read_text()
    # the representative layer is the deepest swept one
    assert ("Figures 2–4 draw layer 2 (deltanet): intrinsic rates exp(A_log), one A per head "
            "(2 values") in report and "Δ_t·exp(A_log) per token and head (Δ_t 2 wide)" in report
    fits = json.loads((tmp_path / "fits.json").read_text())["models"]
    assert {m: fits[m]["decay"]["delta_channels"] for m in SWEPT_MODELS} \
        == {m: SHAPES[m][1] for m in SWEPT_MODELS}
    if "kimi_linear" in SWEPT_MODELS:
        assert "Δ_t·exp(A_log) per token and key channel of each head (Δ_t 32 wide)" in report
    for m in SWEPT_MODELS:
        assert (tmp_path / m / "fig4_effective_vs_length.png").exists()


def test_the_reader_broadcasts_a_per_head_decay_over_key_channels(tmp_path):
    """A written group of known content: Δ_t 6 wide under 2 heads (a Kimi-style gate) reads as
    Δ_t·exp(A_log) of each channel's head (head-major); a group written before the attribute
    `delta_channels` reads Δ_t as wide as A_log's first axis."""
    import zarr

    from sweep.format.schema import FORMAT
    from sweep.store import writer

    root = zarr.open_group(str(tmp_path / "k.zarr"), mode="w")
    root.attrs.update({"tdos_format": FORMAT, "models": ["k"]})
    g = writer.create_group(root, "k", identity={"arch": "kimi_linear"}, checkpoint={},
                            dtype="float64", inputs={"sequences": 1, "length": 4, "seed": 0},
                            layer_lengths=((0, 4), (1, 4)), token_block=4,
                            tokens=np.zeros((1, 4), np.int64), d_model=3,
                            layer_kinds=["deltanet", "mamba2"], a_log_shapes=[[2], [5]],
                            delta_channels=[6, 5])
    delta = np.arange(1.0, 25.0).reshape(4, 6)                                  # (T, c)
    writer.write_a_log(g, 0, np.log([2.0, 3.0]))
    writer.write_a_log(g, 1, np.zeros(5))
    for row, d in ((0, delta), (1, np.ones((4, 5)))):
        writer.write_block(g, row, 0, 0, 0, writer.BlockValues(eig=np.zeros((4, 3), complex), delta=d))
    st = open_store(tmp_path / "k.zarr")
    np.testing.assert_allclose(st.effective_rates(0), delta * [2, 2, 2, 3, 3, 3], rtol=1e-15)
    np.testing.assert_allclose(st.intrinsic_rates(0), [2.0, 3.0], rtol=1e-15)
    assert [st.delta_channels(0), st.delta_channels(1)] == [6, 5] and st.delta(1).shape == (4, 5)
    del g.attrs["delta_channels"]
    older = open_store(tmp_path / "k.zarr")
    assert [older.delta_channels(0), older.delta_channels(1)] == [2, 5]
    np.testing.assert_array_equal(older.delta(1), np.ones((4, 5)))


def test_a_store_that_named_the_layer_recurrent_is_refused_in_one_line(checkpoints, tmp_path):
    """A group swept before delta-rule layers were `deltanet` holds no Δ_t or A_log arrays for
    them: resuming it is refused before any task, naming the layers and the fix."""
    from sweep.errors import StoreMismatch
    from sweep.plan.make import make_plan
    from sweep.store.writer import open_store as open_for_sweep

    plan = make_plan(config_from_dict({
        "model": {"path": str(checkpoints["olmo_hybrid"]), "dtype": "float64"},
        "inputs": {"sequences": 1, "length": 4, "seed": 0}, "layers": [0],
        "store": str(tmp_path / "run.zarr")}))
    g = open_for_sweep(plan)[plan.models[0].name]
    g.attrs["layer_kinds"] = ["recurrent", "attention"] * 2
    with pytest.raises(StoreMismatch, match=r"swept when its layers were named otherwise \(layer 0: "
                                            r"recurrent -> deltanet; layer 2: recurrent -> deltanet\)"
                                            r".* sweep into a new --store path$"):
        open_for_sweep(plan)
