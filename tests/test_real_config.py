"""`make real`'s configs (docs/real.md) declare their study before they sweep, and carry what its
tests are read against: k >= 8 nulls of every declared kind, a quantization ensemble of >= 8 on
the nulls' tokens, the shared-basis null for the cross-layer observable, the representative
layer in float64 and float32 on the same tokens, depth and memory there; both on the same
tokens, so layer 15 is the same computation in each store."""
from __future__ import annotations

from pathlib import Path

from sweep.config.load import load_config

ROOT = Path(__file__).resolve().parents[1]
REAL, LAYERS = ROOT / "configs" / "smollm2-real.yaml", ROOT / "configs" / "smollm2-135m.yaml"


def test_the_across_depth_store_declares_its_family_and_sweeps_what_it_tests():
    cfg = load_config(LAYERS)
    m, study = cfg.models[0], cfg.study
    assert m.dtype == "float64" and set(study.layers) == {7, 15, 22} == set(cfg.layers)
    assert {"beta", "density", "tail_width", "log_frobenius", "nonnormality"} <= set(study.observables)
    assert {"random_init", "shuffled", "gaussian"} <= set(study.against)
    assert all(getattr(m.nulls, kind) >= 8 for kind in study.against)
    assert m.quantization.ensemble >= 8 and m.quantization.sequences in (None, m.nulls.sequences)
    assert cfg.analysis.layer in study.layers


def test_the_representative_store_tests_alignment_against_the_shared_basis_null_in_both_dtypes():
    cfg = load_config(REAL)
    fp64, fp32 = cfg.models
    assert (fp64.dtype, fp32.dtype) == ("float64", "float32") and fp64.path == fp32.path
    assert "alignment" in cfg.study.observables and cfg.depth is not None and cfg.memory is not None
    assert cfg.study.kinds("alignment") == ("shuffled_layers",)
    assert fp64.nulls.shuffled_layers >= 8 and cfg.analysis.layer in cfg.study.layers


def test_both_stores_read_the_same_tokens():
    layers, rep = load_config(LAYERS), load_config(REAL)
    assert layers.inputs == rep.inputs and layers.models[0].path == rep.models[0].path
    assert rep.analysis.layer in layers.layers and layers.store != rep.store
