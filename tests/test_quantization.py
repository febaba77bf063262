"""Issue 49 item 4, the weights: a quantization-ensemble member moves every weight within its
own rounding bin. Oracles: blocks written by gguf's own quantizer, whose scale and offset are
read here from the block bytes (not through sweep.checkpoints.gguf_tensors.UNIT); the code lattice of
random K-quant blocks, which gguf cannot write; numpy/torch rounding for F16 and BF16."""
import subprocess
import sys

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

from sweep.errors import ConfigError
from sweep.checkpoints.ensemble import Quantized, draw, draws
from sweep.checkpoints.formats import open_checkpoint
from sweep.checkpoints.gguf_tensors import gaps, perturbed
from sweep.format.variants import Variant

# type -> (offset of the f16 scale d, of the f16 offset m or None, code of w = 0 with m = 0)
LEGACY = {T.Q8_0: (0, None, 0), T.Q4_0: (0, None, 8), T.Q4_1: (0, 2, 0), T.Q5_0: (0, None, 16),
          T.Q5_1: (0, 2, 0)}


def _blocks(raw, qtype):
    return raw.reshape(-1, GGML_QUANT_SIZES[qtype][1])


@pytest.mark.parametrize("qtype", list(LEGACY), ids=lambda t: t.name)
def test_a_member_stays_in_the_bin_of_gguf_s_own_quantizer(qtype):
    rng = np.random.default_rng(1)
    w = rng.normal(size=(16, 64)).astype(np.float32)              # 2 blocks per row
    raw = quantize(w, qtype)                                      # (16, 2·bytes) uint8
    deq = dequantize(raw, qtype).astype(np.float64)               # (16, 64)
    d_at, m_at, zero = LEGACY[qtype]
    blocks = _blocks(raw, qtype)
    d = np.repeat(blocks[:, d_at:d_at + 2].copy().view(np.float16).astype(np.float64), 32)
    m = (np.repeat(blocks[:, m_at:m_at + 2].copy().view(np.float16).astype(np.float64), 32)
         if m_at is not None else 0.0)
    step = np.abs(d).reshape(deq.shape)
    below, above = gaps(raw, qtype)
    np.testing.assert_array_equal(below, step)
    np.testing.assert_array_equal(above, step)
    p = perturbed(raw, qtype, draws(3), name="blk.0.attn_q.weight")
    assert p.shape == deq.shape and p.dtype == np.float64
    moved = (p - deq) / step
    assert np.all(np.abs(moved) <= 0.5)
    # uniform on [-1/2, 1/2): sd 1/sqrt(12) = 0.289, and every weight moved
    assert 0.25 < moved.std() < 0.33 and np.count_nonzero(moved) == moved.size

    def code(x):                                  # re-quantized with the block's own d and m
        return np.rint((x.reshape(-1) - m) / d.reshape(-1)) + zero
    np.testing.assert_array_equal(code(p), code(deq))


# type -> (offset of d, the largest |sub-block scale|, weights per sub-block)
K_QUANTS = {T.Q2_K: (80, 15, 16), T.Q3_K: (108, 32, 16), T.Q4_K: (0, 63, 32),
            T.Q5_K: (0, 63, 32), T.Q6_K: (208, 128, 16)}


@pytest.mark.parametrize("qtype", list(K_QUANTS), ids=lambda t: t.name)
def test_a_k_quant_step_is_d_times_an_integer_scale_and_spans_the_code_lattice(qtype):
    """gguf cannot write K-quants: random blocks, with finite f16 d and dmin."""
    d_at, top, sub = K_QUANTS[qtype]
    rng = np.random.default_rng(2)
    blocks = rng.integers(0, 256, size=(6, GGML_QUANT_SIZES[qtype][1]), dtype=np.uint8)
    scales = rng.uniform(0.01, 0.1, size=(6, 2)).astype(np.float16)
    blocks[:, d_at:d_at + 2] = scales[:, :1].view(np.uint8)
    if qtype in (T.Q2_K, T.Q4_K, T.Q5_K):               # dmin follows d
        blocks[:, d_at + 2:d_at + 4] = scales[:, 1:].view(np.uint8)
    raw = blocks.reshape(3, -1)                          # 3 rows of 2 super-blocks
    step, above = gaps(raw, qtype)
    np.testing.assert_array_equal(step, above)
    d = np.repeat(scales[:, 0].astype(np.float64), 256).reshape(step.shape)
    ratio = step / d                                     # |sub-block scale|
    np.testing.assert_allclose(ratio, np.rint(ratio), atol=1e-6)
    assert ratio.max() <= top and len(np.unique(ratio)) > 4
    deq = dequantize(raw, qtype).astype(np.float64).reshape(-1, sub)      # (sub-blocks, sub)
    s = step.reshape(-1, sub)
    assert np.all(s == s[:, :1])                         # one step per sub-block
    live = s[:, 0] > 0
    k = (deq[live] - deq[live].min(axis=1, keepdims=True)) / s[live]
    np.testing.assert_allclose(k, np.rint(k), atol=1e-3)  # the codes' lattice, spacing = step
    p = perturbed(raw, qtype, draws(0), name="blk.1.ffn_down.weight").reshape(-1, sub)
    assert np.all(np.abs(p - deq) <= s / 2 * (1 + 1e-12))


def test_f16_and_bf16_members_round_back_to_the_stored_value():
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(size=4000), [0.0, -0.0, 1.0, -2.0, 65504.0]])
    h = x.astype(np.float16)
    p = perturbed(h, T.F16, draws(1), name="t")
    assert np.count_nonzero(p != h) > 3990
    np.testing.assert_array_equal(p.astype(np.float16), h)       # every draw rounds back
    np.testing.assert_array_equal(perturbed(h.view(np.uint8), T.F16, draws(1), name="t"), p)  # raw bytes
    below, above = gaps(h, T.F16)
    assert below[-3] == 2.0 ** -11 and above[-3] == 2.0 ** -10   # 1.0: half a gap below
    b = torch.tensor(x, dtype=torch.bfloat16)
    raw = b.view(torch.int16).numpy().view(np.uint8).reshape(1, -1)   # the reader's bytes
    pb = perturbed(raw, T.BF16, draws(1), name="t")
    back = torch.tensor(pb.reshape(-1)).to(torch.bfloat16)
    assert torch.equal(back, b) and np.count_nonzero(pb.reshape(-1) != b.double().numpy()) > 3990


def test_the_draw_is_seeded_by_member_and_tensor_name_and_stable_across_processes():
    a = draw(0, "blk.0.attn_q.weight", (3, 5))
    assert np.array_equal(a, draw(0, "blk.0.attn_q.weight", (3, 5)))
    assert not np.array_equal(a, draw(1, "blk.0.attn_q.weight", (3, 5)))
    assert not np.array_equal(a, draw(0, "blk.0.attn_k.weight", (3, 5)))
    code = ("from sweep.checkpoints.ensemble import draw; "
            "print(repr(draw(0, 'blk.0.attn_q.weight', (3, 5)).tolist()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert eval(out.stdout) == a.tolist()
    raw = quantize(np.random.default_rng(4).normal(size=(10, 32)).astype(np.float32), T.Q8_0)
    rows = np.array([7, 2, 2])
    whole = perturbed(raw, T.Q8_0, draws(5), "token_embd.weight")
    np.testing.assert_array_equal(perturbed(raw, T.Q8_0, draws(5), "token_embd.weight", rows), whole[rows])


def _gguf(path, tensors):
    w = GGUFWriter(str(path), "llama")
    for name, (values, qtype) in tensors.items():
        w.add_tensor(name, quantize(values, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_gguf_file_read_back_perturbs_as_its_arrays_and_the_plan_check_refuses_f32(tmp_path):
    rng = np.random.default_rng(5)
    q = rng.normal(size=(8, 64)).astype(np.float32)
    f = _gguf(tmp_path / "q.gguf", {"blk.0.attn_q.weight": (q, T.Q8_0),
                                    "blk.0.attn_norm.weight": (np.ones(64, np.float32), T.F32)})
    t = {t.name: t for t in GGUFReader(f).tensors}
    got = perturbed(t["blk.0.attn_q.weight"].data, t["blk.0.attn_q.weight"].tensor_type, draws(0),
                    "blk.0.attn_q.weight")
    np.testing.assert_array_equal(got, perturbed(quantize(q, T.Q8_0), T.Q8_0, draws(0), "blk.0.attn_q.weight"))
    norm = t["blk.0.attn_norm.weight"]
    np.testing.assert_array_equal(perturbed(norm.data, norm.tensor_type, draws(0), norm.name), np.ones(64))
    member = Quantized(Variant("quantized", 0, "m", "ensemble"))
    assert member.check(open_checkpoint(f), "models[0].quantization") == {"Q8_0": 1, "F32": 1}
    flat = _gguf(tmp_path / "f.gguf", {"blk.0.attn_q.weight": (q, T.F32)})
    with pytest.raises(ConfigError, match=r"^models\[0\]\.quantization: .*f\.gguf is not quantized "
                                          r"\(every tensor is F32\) — remove `quantization:`"):
        member.check(open_checkpoint(flat), "models[0].quantization")
    with pytest.raises(ConfigError, match="is not a GGUF file"):
        member.check(open_checkpoint("checkpoints/tiny-neox-bytes"), "models[0].quantization")


def _doc(path, store, quantization) -> dict:
    return {"model": {"path": str(path), "name": "m", "quantization": quantization},
            "inputs": {"sequences": 2, "length": 6}, "layers": [0], "store": str(store)}


def test_quantization_config_errors_name_the_field_and_an_unquantized_checkpoint_is_refused(tmp_path):
    from sweep.config.load import config_from_dict
    from sweep.plan.make import make_plan

    neox = "checkpoints/tiny-neox-bytes"
    cases = [({"ensemble": 0}, "model.quantization.ensemble"),
             ({"ensemble": 2, "sequences": 3}, "model.quantization.sequences"),
             ({"members": 2}, "model.quantization.members"),
             ({"ensemble": "two"}, "model.quantization.ensemble"),
             ({}, "model.quantization.ensemble")]
    for q, field in cases:
        with pytest.raises(ConfigError) as e:
            config_from_dict(_doc(neox, tmp_path / "s.zarr", q))
        assert str(e.value).startswith(f"{field}:") and "\n" not in str(e.value)
    cfg = config_from_dict(_doc(neox, tmp_path / "s.zarr", {"ensemble": 2}))
    with pytest.raises(ConfigError, match=r"^model\.quantization: .*tiny-neox-bytes is not a GGUF "
                                          r"file.* — remove `quantization:` from model$"):
        make_plan(cfg)
    doc = _doc(neox, tmp_path / "s.zarr", {"ensemble": 1})
    doc["models"] = [doc.pop("model"), {"path": neox, "name": "m.quantized.0"}]
    with pytest.raises(ConfigError, match=r"^models\[1\]\.name: .*also used by models\[0\]\.quantization"):
        config_from_dict(doc)


def _ensemble_store(tmp_path, member_betas, shuffled=None):
    """Model `a` (β = −0.2), four random_init nulls (β = −0.7), four shuffled ones of β
    `shuffled` when given, and one member per entry of `member_betas`, written through the
    real writer; members carry the sweep's `variant` attribute."""
    import dataclasses

    from synthetic_store import null_models, synthetic_model, write_store

    kw = dict(nseq=2, lmax=32, d=32, n_ir=16)       # β from ≥ 500 modes (its minimum)
    a = synthetic_model("a", "attention", -0.2, rows=1, **kw)
    members = [dataclasses.replace(synthetic_model(f"a.quantized.{k}", "attention", b, rows=1,
                                                   seed=500 + k, **kw),
                                   variant=Variant("quantized", k, "a", "ensemble"))
               for k, b in enumerate(member_betas)]
    nulls = null_models(a, -0.7, n=4, **kw)
    if shuffled is not None:
        nulls += null_models(a, shuffled, n=4, kind="shuffled", seed=300, **kw)
    return write_store(tmp_path / "s.zarr", [a, *nulls, *members])


def test_analyze_reports_each_observable_over_the_ensemble_and_its_verdict_needs_every_member(tmp_path):
    import json

    from analysis.report.analyze import analyze
    from sweep.format.settings import Settings

    settings = Settings(n_boot=20, lengths=(32,))
    path = _ensemble_store(tmp_path, [-0.2, -0.2, -0.2])
    analyze(path, tmp_path / "r", settings, progress=False)
    doc = json.loads((tmp_path / "r" / "fits.json").read_text())
    assert set(doc["models"]) == {"a"}                  # members are neither models nor nulls
    assert list(doc["models"]["a"]["nulls"]["nulls"]) == [f"a.random_init.{k}" for k in range(4)]
    ens = doc["ensembles"]["a"]
    assert ens["members"] == ["a.quantized.0", "a.quantized.1", "a.quantized.2"]
    beta = ens["observables"][0]
    assert beta["observable"].startswith("β")
    vals = [m["value"] for m in beta["members"].values()]
    assert beta["min"] == min(vals) and beta["max"] == max(vals) and beta["sd"] > 0
    assert all(abs(v + 0.2) < 0.15 for v in vals)       # the members' known β
    vs = beta["against_nulls"]["random_init"]
    assert vs["verdict"].startswith("stands at every member against its random_init nulls")
    assert vs["p_adjusted"] >= vs["p_ensemble"] >= max(c["p_raw"] for c in vs["comparisons"].values())
    md = (tmp_path / "r" / "report.md").read_text()
    assert "## Quantization ensembles" in md and "stands at every member" in md
    # one member that looks like the nulls: the verdict no longer holds with the ensemble
    from analysis.io.store import open_store
    from analysis.studies.ensemble import ensemble_study
    from analysis.studies.nulls import null_study
    from sweep.format.settings import Primary

    st = open_store(_ensemble_store(tmp_path / "b", [-0.2, -0.7, -0.2]), "a")
    primary = Primary("mle", "symmetry-removed", "the test's")
    beta = ensemble_study(st, 0, 32, settings, primary).spreads[0]
    vs = beta.against_nulls["random_init"]
    assert vs.verdict.startswith("does not hold at every member")
    assert vs.comparisons["a.quantized.1"].p_raw == vs.p_ensemble > 0.1
    trained = null_study(st, 0, 32, settings, primary).comparisons[0]     # the trained one alone
    assert trained.p_raw < 0.05                  # t(3) on 4 nulls: 0.011 here, below the level


def test_the_shipped_smollm2_config_loads_with_its_ensemble():
    from sweep.config.load import load_config

    cfg = load_config("configs/smollm2-135m.yaml")
    m = cfg.models[0]
    assert m.quantization.ensemble >= 2 and m.nulls.random_init >= 4 and m.nulls.shuffled >= 4
    assert cfg.inputs.windows == "document" and cfg.inputs.bos == "always"
    assert cfg.analysis.layer in cfg.layers and len(cfg.layers) >= 3      # make real: 7, 15, 22


def test_the_ensemble_family_reads_p_back_with_the_t_its_interval_used(tmp_path):
    """Holm's raw p of an observable is p_ensemble: read back from the deciding comparison's
    interval with its t(k − 1), never with the normal quantile (which gave 6e-11 for a
    p_ensemble of 1e-4 on SmolLM2's kernel alignment)."""
    from analysis.io.store import open_store
    from analysis.studies.ensemble import ensemble_study
    from sweep.format.settings import Primary, Settings

    st = open_store(_ensemble_store(tmp_path, [-0.2, -0.2, -0.2]), "a")
    study = ensemble_study(st, 0, 32, Settings(n_boot=20, lengths=(32,)),
                           Primary("mle", "symmetry-removed", "the test's"))
    tested = [a for s in study.spreads for a in s.against_nulls.values() if np.isfinite(a.p_ensemble)]
    assert tested and len(tested) == len(study.family.tests)
    for vs, test in zip(tested, study.family.tests):
        assert test.p_raw == pytest.approx(vs.p_ensemble, rel=1e-6)
        assert test.p_method == "t(3)" and vs.p_adjusted >= vs.p_ensemble


def test_the_ensemble_reads_each_null_kind_on_its_own(tmp_path):
    """random_init nulls far from the model, shuffled ones at its β: pooled, they would make
    one wide "null distribution"; per kind, the verdict stands against random_init and not
    against shuffled, each its own family member."""
    from analysis.io.store import open_store
    from analysis.studies.ensemble import ensemble_study
    from sweep.format.settings import Primary, Settings

    st = open_store(_ensemble_store(tmp_path, [-0.2, -0.2, -0.2], shuffled=-0.2), "a")
    study = ensemble_study(st, 0, 32, Settings(n_boot=20, lengths=(32,)),
                           Primary("mle", "symmetry-removed", "the test's"))
    beta = study.spreads[0]
    assert set(beta.against_nulls) == {"random_init", "shuffled"}
    assert beta.against_nulls["random_init"].verdict.startswith("stands at every member")
    assert beta.against_nulls["shuffled"].verdict.startswith("does not hold")
    assert all(len(c.nulls) == 4 for a in beta.against_nulls.values() for c in a.comparisons.values())
    assert study.family.dims["null kinds, each its own comparison"] == 2
