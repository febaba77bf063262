"""A store that grows (docs/sweeps.md, "Growing a store"): a config that adds layers,
sequences, nulls or depth spans extends its store on a real cluster; every chunk file the first
sweep wrote stays byte for byte and untouched (mtime_ns), the grown store holds what a sweep of
the larger config from scratch holds, and a change of what a block is stays refused."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
import zarr
from families import FAMILIES

from analysis import aggregate, open_store
from analysis.views.summary import summary_rows
from sweep.cli import main
from sweep.config.load import config_from_dict
from sweep.errors import StoreMismatch
from sweep.format.ledger import is_done
from sweep.format.settings import Settings
from sweep.run import run_sweep

L, B = 8, 4


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from conftest import _perturb
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = FAMILIES["llama"]()
    config.num_hidden_layers = 4
    model = AutoModelForCausalLM.from_config(config).eval()
    _perturb(model, torch.Generator().manual_seed(1))
    path = tmp_path_factory.mktemp("grow") / "llama"
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def worker():
    from conftest import local_client

    with local_client(1) as c:
        yield c


def _doc(path, store, layers=(0,), sequences=1, **extra) -> dict:
    model = {"path": str(path), "name": "llama", "dtype": "float64", **extra.pop("model", {})}
    return {"model": model, "inputs": {"sequences": sequences, "length": L, "seed": 3},
            "layers": list(layers), "store": str(store),
            "compute": {"token_block": B, "live_every": 0}, **extra}


def _sweep(doc, worker):
    result = run_sweep(config_from_dict(doc), client=worker, progress=False)
    assert (result.exit_code, result.errors) == (0, [])
    return result


def _chunks(store, skip=()) -> dict:
    """{chunk file: (mtime_ns, sha256)} of every chunk (not metadata) of the store."""
    out = {}
    for p in Path(store).rglob("*"):
        if p.is_file() and p.name != "zarr.json" and not any(s in p.parts for s in skip):
            out[str(p.relative_to(store))] = (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def _kept(before: dict, after: dict) -> None:
    changed = [k for k, v in before.items() if after.get(k) != v]
    assert not changed, f"chunks rewritten or removed: {changed[:5]}"


def _dry_run(doc, tmp_path, capsys) -> str:
    import yaml

    path = tmp_path / f"c{len(list(tmp_path.glob('c*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(doc))
    capsys.readouterr()
    assert main(["sweep", str(path), "--dry-run"]) == 0
    return capsys.readouterr().out


def _compute_seconds(doc, tmp_path) -> float:
    """The dry run's core-seconds of `doc` (sweep/budget/), against its store as it is."""
    import yaml

    from sweep.budget import size_sweep
    from sweep.config.load import load_config
    from sweep.plan.make import make_plan

    path = tmp_path / f"b{len(list(tmp_path.glob('b*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return size_sweep(make_plan(load_config(path)), workers=1).core_seconds


def test_layers_grow_and_the_grown_store_equals_a_fresh_one(checkpoint, worker, tmp_path, capsys):
    store = tmp_path / "run.zarr"
    _sweep(_doc(checkpoint, store, layers=[0]), worker)
    before = _chunks(store)
    assert ("store: grows the store: +1 layer (3); 2 blocks to compute, 2 done kept"
            in _dry_run(_doc(checkpoint, store, layers=[0, 3]), tmp_path, capsys))
    # the estimate prices the 2 blocks left of 4, not all of them (its setup terms stay)
    fresh = _compute_seconds(_doc(checkpoint, tmp_path / "other.zarr", layers=[0, 3]), tmp_path)
    half = _compute_seconds(_doc(checkpoint, store, layers=[0, 3]), tmp_path)
    grown = _sweep(_doc(checkpoint, store, layers=[0, 3]), worker)
    setup = _compute_seconds(_doc(checkpoint, store, layers=[0, 3]), tmp_path)
    assert setup < half < fresh and half - setup == pytest.approx((fresh - setup) / 2)
    assert {(r["layer"], r["block"]) for r in grown.results if "block" in r} == {(3, 0), (3, 1)}
    _kept(before, _chunks(store))
    # a layer between the two: rows are appended, so the store's row order is 0, 3, 1
    _sweep(_doc(checkpoint, store, layers=[0, 1, 3]), worker)
    g = zarr.open_group(str(store), path="llama", mode="r")
    assert list(g["layer"][...]) == [0, 3, 1] and is_done(g["ledger"][...]).all()
    capsys.readouterr()
    assert main(["status", str(store)]) == 0
    assert [line.split()[1] for line in capsys.readouterr().out.splitlines()[1:4]] == ["0", "1", "3"]
    history = zarr.open_group(str(store), mode="r").attrs["history"]
    assert [h["added"] for h in history] == ["created", "+1 layer (3)", "+1 layer (1)"]
    assert history[-1]["fingerprint"] == zarr.open_group(str(store), mode="r").attrs["fingerprint"]
    fresh = tmp_path / "fresh.zarr"
    _sweep(_doc(checkpoint, fresh, layers=[0, 1, 3]), worker)
    a, b = open_store(str(store)), open_store(str(fresh))
    assert (a.layers, a.row_layers) == ([0, 1, 3], [0, 3, 1])     # readers see layers ascending
    assert a.block_counts() == b.block_counts()
    assert [r["layer"] for r in summary_rows(str(store), Settings(n_boot=20))] == [0, 1, 3]   # tdos status --spectra
    for layer in (0, 1, 3):
        np.testing.assert_allclose(a.eigenvalues(layer), b.eigenvalues(layer), rtol=1e-12, atol=1e-13)
    ha, hb = (aggregate(str(s)).model("llama") for s in (store, fresh))   # histograms, read by row
    for layer in (0, 1, 3):
        np.testing.assert_array_equal(ha.hist(layer), hb.hist(layer))


def test_a_smaller_config_hides_and_keeps(checkpoint, worker, tmp_path, capsys):
    store = tmp_path / "run.zarr"
    _sweep(_doc(checkpoint, store, layers=[0, 3]), worker)
    before = _chunks(store)
    out = _dry_run(_doc(checkpoint, store, layers=[3]), tmp_path, capsys)
    assert "0 blocks to compute, 2 done kept; 2 done blocks outside this config kept" in out
    again = _sweep(_doc(checkpoint, store, layers=[3]), worker)
    assert (again.planned, again.total, again.done) == (0, 2, 2)
    _kept(before, _chunks(store))
    assert sorted(open_store(str(store)).layers) == [0, 3]     # the analysis reads every done block


def test_sequences_grow(checkpoint, worker, tmp_path):
    store = tmp_path / "run.zarr"
    _sweep(_doc(checkpoint, store, layers=[0, 1], sequences=1), worker)
    before = _chunks(store)
    grown = _sweep(_doc(checkpoint, store, layers=[0, 1], sequences=3), worker)
    assert {r["seq"] for r in grown.results if "block" in r} == {1, 2}
    _kept(before, _chunks(store))
    g = zarr.open_group(str(store), path="llama", mode="r")
    assert g["tokens"].shape == (3, L) and is_done(g["ledger"][...]).all()
    assert g.attrs["inputs"]["sequences"] == 3


def test_nulls_grow(checkpoint, worker, tmp_path):
    store = tmp_path / "run.zarr"
    _sweep(_doc(checkpoint, store, model={"nulls": {"random_init": 1}}), worker)
    before = _chunks(store)
    grown = _sweep(_doc(checkpoint, store, model={"nulls": {"random_init": 1, "shuffled": 1}}), worker)
    assert {r["model"] for r in grown.results if "block" in r} == {"llama.shuffled.0"}
    _kept(before, _chunks(store))
    root = zarr.open_group(str(store), mode="r")
    assert root.attrs["models"] == ["llama", "llama.random_init.0", "llama.shuffled.0"]
    assert root.attrs["history"][-1]["added"] == "+1 null model (llama.shuffled.0)"


def test_depth_spans_grow(checkpoint, worker, tmp_path):
    store = tmp_path / "run.zarr"
    doc = _doc(checkpoint, store, layers=[0, 1, 2], depth={"spans": [2]})
    _sweep(doc, worker)
    before = _chunks(store, skip=("depth_ledger",))
    spans = _sweep({**doc, "depth": {"spans": [2, 3]}}, worker)
    assert len([r for r in spans.results if "walk_layers" in r]) == 2       # every walk, once
    g = zarr.open_group(str(store), path="llama", mode="r")
    assert g.attrs["depth"]["spans"] == [2, 3] and g["stack_gain"].shape[0] == 2
    assert zarr.open_group(str(store), mode="r").attrs["history"][-1]["added"] == "+1 depth span (3)"
    assert np.isfinite(g["stack_gain"][1, 0, 0]).all()           # span 3 from layer 0, every token
    after = _chunks(store, skip=("depth_ledger",))
    assert all(after[k][1] == v[1] for k, v in before.items())   # redone walks write the same values


@pytest.mark.parametrize("change, field", [
    ({"model": {"dtype": "float32"}}, "models[llama].dtype: 'float64' -> 'float32'"),
    ({"compute": {"token_block": 2, "live_every": 0}}, "token_block: 4 -> 2"),
    ({"inputs": {"sequences": 1, "length": L, "seed": 4}}, "inputs.seed: 3 -> 4"),
])
def test_what_a_block_is_stays_refused(checkpoint, worker, tmp_path, change, field):
    store = tmp_path / "run.zarr"
    _sweep(_doc(checkpoint, store), worker)
    before = _chunks(store)
    doc = _doc(checkpoint, store, layers=[0, 1])
    for k, v in change.items():
        doc[k] = {**doc[k], **v}
    with pytest.raises(StoreMismatch) as e:
        run_sweep(config_from_dict(doc), client=worker, progress=False)
    assert field in str(e.value) and "\n" not in str(e.value)
    assert _chunks(store) == before


def test_another_checkpoint_under_the_same_name_is_refused(checkpoint, worker, tmp_path):
    import shutil

    store = tmp_path / "run.zarr"
    _sweep(_doc(checkpoint, store), worker)
    other = tmp_path / "other"
    shutil.copytree(checkpoint, other)
    with pytest.raises(StoreMismatch, match=r"models\[llama\]\.path: .* -> "):
        run_sweep(config_from_dict(_doc(other, store, layers=[0, 1])), client=worker, progress=False)


def test_memory_lags_grow(checkpoint, worker, tmp_path):
    store = tmp_path / "run.zarr"
    doc = _doc(checkpoint, store, layers=[0], memory={"lags": 2, "probes": 0, "every": 4})
    _sweep(doc, worker)
    before = _chunks(store, skip=("memory", "memory_stderr", "memory_ledger"))
    more = _sweep({**doc, "memory": {"lags": 5, "probes": 0, "every": 4}}, worker)
    assert [r["seq"] for r in more.results if "memory_layer" in r] == [0]
    assert not [r for r in more.results if "block" in r]
    _kept(before, _chunks(store, skip=("memory", "memory_stderr", "memory_ledger")))
    m = open_store(str(store), model="llama").memory(0, 0)            # (L, lags + 1)
    assert m.shape == (L, 6) and np.isfinite(m[4, :5]).all() and np.isnan(m[4, 5])   # t - k < 0
