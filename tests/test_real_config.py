"""`make real`'s config (docs/real.md) carries what the report is read against: nulls of each
kind, enough for a t test, the quantization ensemble on the same tokens, depth and memory, in
float64."""
from __future__ import annotations

from pathlib import Path

from sweep.config.load import load_config

ROOT = Path(__file__).resolve().parents[1]


def test_make_real_sweeps_nulls_ensemble_depth_and_memory_in_float64():
    cfg = load_config(ROOT / "configs" / "smollm2-real.yaml")
    m = cfg.models[0]
    assert m.dtype == "float64"
    assert m.nulls.random_init >= 4 and m.nulls.shuffled >= 4    # a t(3) test per kind at least
    assert m.quantization.ensemble >= 2
    assert m.nulls.sequences == m.quantization.sequences        # the same tokens for both
    assert cfg.depth is not None and cfg.memory is not None
    assert cfg.analysis.layer in cfg.layers



def test_make_real_reads_across_depth_on_the_same_tokens():
    """The across-depth store (configs/smollm2-135m.yaml) covers the first and last layer and
    the representative one, in float64, with enough nulls of each kind at every layer, on the
    very tokens of the representative store, so layer 15's values are the same in both."""
    layers = load_config(ROOT / "configs" / "smollm2-135m.yaml")
    rep = load_config(ROOT / "configs" / "smollm2-real.yaml")
    m = layers.models[0]
    assert {0, 29, rep.analysis.layer} <= set(layers.layers) and len(layers.layers) >= 4
    assert m.dtype == "float64" and m.nulls.random_init >= 4 and m.nulls.shuffled >= 4
    assert layers.inputs == rep.inputs and m.path == rep.models[0].path
    assert layers.analysis.layer == rep.analysis.layer
    assert layers.store != rep.store
