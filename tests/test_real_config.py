"""`make real`'s two configs (docs/real.md): the second grows the first's store, so everything
that makes a stored block what it is must agree between them, and the first must carry what
the report is read against (nulls of each kind, enough for a t test, the ensemble, depth,
memory) in float64."""
from __future__ import annotations

from pathlib import Path

from sweep.config.identity import identity_dict
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


def test_the_layers_config_grows_the_same_blocks():
    first = load_config(ROOT / "configs" / "smollm2-real.yaml")
    grown = load_config(ROOT / "configs" / "smollm2-real-layers.yaml")
    assert grown.store == first.store and grown.inputs == first.inputs
    assert grown.compute.token_block == first.compute.token_block
    a, b = identity_dict(first)["models"][0], identity_dict(grown)["models"][0]
    assert {k: a[k] for k in ("path", "name", "dtype")} == {k: b[k] for k in ("path", "name", "dtype")}
    assert first.analysis.layer in grown.layers and set(grown.layers) - set(first.layers)
