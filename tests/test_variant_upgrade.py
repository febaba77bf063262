"""`tdos upgrade` of a format-5 store's weight variants (issue 55 item 1): the `null` and
`quantization` attributes a format-5 writer left become the one `variant` attribute, and a
member's group `<model>.quant.<k>` becomes `<model>.quantized.<k>`. The oracle is the format-6
writer's own store: written by it, turned back into format 5 by hand (as format 5 wrote it),
upgraded, and compared attribute by attribute, also after an upgrade stopped half way."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest
import zarr
from synthetic_store import null_models, synthetic_model, write_store

from analysis import open_store
from sweep.cli import main
from sweep.format.schema import FORMAT
from sweep.format.variants import Variant

KW = dict(nseq=2, lmax=8, d=16, n_ir=8)


def _fresh(path) -> Path:
    """Model `a`, two random_init nulls, one shuffled, two ensemble members, format 6."""
    a = synthetic_model("a", "attention", -0.2, rows=1, **KW)
    members = [dataclasses.replace(synthetic_model(f"a.quantized.{k}", "attention", -0.2, rows=1,
                                                   seed=50 + k, **KW),
                                   variant=Variant("quantized", k, "a", "ensemble")) for k in range(2)]
    models = [a, *null_models(a, -0.5, n=2, **KW),
              *null_models(a, -0.5, n=1, kind="shuffled", seed=9, **KW), *members]
    # as a sweep records them (an older store's `weights_sha256` becomes this on upgrade)
    files = {"files_sha256": {"model.safetensors": "0" * 64}}
    return write_store(path, [dataclasses.replace(m, extra_identity=files) for m in models])


def _as_format_5(path: Path) -> None:
    """What a format-5 writer left: `null` {of, kind, seed} / `quantization` {of, member,
    ensemble} (also inside `model`), members in `<of>.quant.<k>`."""
    root = zarr.open_group(str(path), mode="r+")
    names = []
    for name in root.attrs["models"]:
        g = root[name]
        v = Variant.from_attrs(g.attrs)
        if v is None:
            names.append(name)
            continue
        legacy = ({"null": {"of": v.of, "kind": v.kind, "seed": v.seed}} if v.role == "null" else
                  {"quantization": {"of": v.of, "member": v.seed, "ensemble": 2}})
        model = {k: x for k, x in g.attrs["model"].items() if k != "variant"}
        ident = legacy if v.role == "null" else {"quantization": {"of": v.of, "member": v.seed}}
        g.attrs.update({**legacy, "model": {**model, **ident}})
        del g.attrs["variant"]
        old = f"{v.of}.quant.{v.seed}" if v.role == "ensemble" else name
        if old != name:
            os.rename(path / name, path / old)
        names.append(old)
    root.attrs.update({"tdos_format": 5, "models": names})


def _attrs(path: Path) -> dict:
    root = zarr.open_group(str(path), mode="r")
    return {n: {k: v for k, v in root[n].attrs.asdict().items()} for n in root.attrs["models"]}


@pytest.mark.parametrize("stopped", [False, True])
def test_a_format_5_store_upgrades_to_the_variant_attribute(tmp_path, capsys, stopped):
    want = _attrs(_fresh(tmp_path / "fresh.zarr"))
    path = _fresh(tmp_path / "old.zarr")
    _as_format_5(path)
    assert "a.quant.1" in zarr.open_group(str(path), mode="r").attrs["models"]
    if stopped:                 # an upgrade that recorded its renames and moved one group
        root = zarr.open_group(str(path), mode="r+")
        root.attrs["upgrading"] = {"a.quant.0": "a.quantized.0", "a.quant.1": "a.quantized.1"}
        os.rename(path / "a.quant.0", path / "a.quantized.0")
        g = root["a.quantized.0"]
        v = Variant("quantized", 0, "a", "ensemble")
        g.attrs.update({"variant": v.attrs(),
                        "model": {**{k: x for k, x in g.attrs["model"].items() if k != "quantization"},
                                  "variant": v.attrs()}})
        del g.attrs["quantization"]
    assert main(["upgrade", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: format {FORMAT} (was 5)\n"
    root = zarr.open_group(str(path), mode="r")
    assert list(root.attrs["models"]) == list(want) and "upgrading" not in root.attrs
    assert _attrs(path) == want
    st = open_store(path, "a")
    assert st.nulls == ["a.random_init.0", "a.random_init.1", "a.shuffled.0"]
    assert st.ensemble == ["a.quantized.0", "a.quantized.1"]
    np.testing.assert_array_equal(st.model("a.quantized.1").eigenvalues(0, 0),
                                  open_store(tmp_path / "fresh.zarr", "a.quantized.1").eigenvalues(0, 0))
