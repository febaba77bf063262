"""The zarr v3 store: the layout sweep/format/schema.py declares, fingerprint refusal that
writes nothing, block writes confined to their own chunks, the ledger, the plan read from
it, one message for an older format and `tdos upgrade`."""
from __future__ import annotations

import dataclasses
import hashlib
import os

import numpy as np
import pytest
import torch
import xarray as xr
import zarr

from sweep.config.load import config_from_dict
from sweep.format import schema
from sweep.format.schema import FORMAT
from sweep.format.ledger import DONE, FLAGGED, Ledger, is_flagged, is_usable
from sweep.plan.make import make_plan
from sweep.store import writer as st
from sweep.store.writer import BlockValues
from sweep.tasks import ALogTask, BlockTask, ResidualTask, pending_tasks


def prepare_store(cfg, create=True):
    return st.open_store(make_plan(cfg), create=create)


def plan(cfg, root):
    return pending_tasks(make_plan(cfg), root)


def _cfg(ck, tmp_path, **inputs):
    return config_from_dict({
        "models": [{"path": str(ck["gpt2"])}, {"path": str(ck["llama"]), "layers": {1: 6}}],
        "inputs": {"sequences": 2, "length": 8, "seed": 0, **inputs},
        "layers": [1, 0], "store": str(tmp_path / "run.zarr"), "compute": {"token_block": 4}})


def _snapshot(path) -> dict:
    """{relative file: (sha256, mtime_ns)} of every file under path."""
    out = {}
    for d, _, files in os.walk(path):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, path)] = (hashlib.sha256(open(p, "rb").read()).hexdigest(),
                                             os.stat(p).st_mtime_ns)
    return out


def _chunk_files(path, array) -> set[str]:
    root = os.path.join(path, array, "c")
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}


def test_layout(tiny_checkpoints, tmp_path):
    cfg = _cfg(tiny_checkpoints, tmp_path)
    root = prepare_store(cfg)
    assert root.attrs["tdos_format"] == schema.FORMAT == 6
    assert root.attrs["models"] == ["gpt2", "llama"]
    assert len(root.attrs["fingerprint"]) == 64 and len(root.attrs["creation_id"]) == 32
    assert root.attrs["software"]["torch"] == torch.__version__
    assert root.attrs["software"]["cuda"] == torch.version.cuda
    assert root.attrs["config"]["inputs"] == {"sequences": 2, "length": 8, "seed": 0, "text": None}
    g = root["gpt2"]
    assert g.attrs["model"]["dtype"] == "float32" and g.attrs["model"]["arch"] == "gpt2"
    assert g.attrs["inputs"] == {"sequences": 2, "length": 8, "seed": 0, "text": None,
                                 "tokenizer": None, "token_block": 4}
    files = [tiny_checkpoints["gpt2"] / n for n in ("config.json", "model.safetensors")]
    assert g.attrs["checkpoint"] == {"dir": str(tiny_checkpoints["gpt2"]), "files": {
        f.name: {"size": f.stat().st_size, "mtime_ns": f.stat().st_mtime_ns,
                 "sha256": hashlib.sha256(f.read_bytes()).hexdigest()} for f in files}}
    assert g.attrs["layer_kinds"] == ["attention", "attention"]
    assert g.attrs["model"]["engine"] in ("fast", "generic")
    assert set(g.array_keys()) == set(schema.group_arrays(ssm=False))
    e = g["eigenvalues"]
    assert (e.shape, e.chunks, e.dtype) == ((2, 2, 8, 32), (1, 1, 4, 32), np.complex64)
    assert e.metadata.dimension_names == ("layer", "seq", "token", "mode")
    assert np.isnan(e[...]).all()
    led = g["ledger"]
    assert (led.shape, led.chunks, led.dtype) == ((2, 2, 2), (1, 1, 1), np.int8)
    eb = g["eig_backend"]
    assert (eb.shape, eb.chunks, eb.dtype) == ((2, 2, 2), (1, 1, 1), np.int8)
    assert (eb[...] == 0).all() and eb.attrs["codes"] == list(schema.EIG_BACKENDS)
    jp = g["jacobian_path"]
    assert (jp.shape, jp.chunks, jp.dtype) == ((2, 2, 2), (1, 1, 1), np.int8)
    assert (jp[...] == 0).all() and jp.attrs["codes"] == list(schema.JACOBIAN_PATHS)
    for name in ("scale_rayleigh", "scale_residual", "shift_rayleigh", "shift_residual"):
        a = g[name]
        assert (a.shape, a.chunks, a.dtype) == ((2, 2, 8), (1, 1, 4), np.float32)
        assert a.metadata.dimension_names == ("layer", "seq", "token") and np.isnan(a[...]).all()
    assert list(g["layer"][...]) == [0, 1] and list(g["layer_length"][...]) == [8, 8]
    tokens = g["tokens"][...]
    assert tokens.shape == (2, 8) and tokens.dtype == np.int64
    np.testing.assert_array_equal(tokens, np.random.default_rng(0).integers(0, 64, size=(2, 8)))
    assert "a_log" not in g and "delta" not in g
    lg = root["llama"]
    assert list(lg["layer"][...]) == [1] and list(lg["layer_length"][...]) == [6]
    ds = xr.open_zarr(cfg.store, group="gpt2", consolidated=False)
    assert ds["eigenvalues"].dims == ("layer", "seq", "token", "mode")
    assert ds["ledger"].dims == ("layer", "seq", "block") and ds["tokens"].dims == ("seq", "token")


def test_changed_config_is_refused_and_store_untouched(tiny_checkpoints, tmp_path):
    cfg = _cfg(tiny_checkpoints, tmp_path)
    prepare_store(cfg)
    before = _snapshot(cfg.store)
    changed = _cfg(tiny_checkpoints, tmp_path, length=6, seed=3)
    with pytest.raises(st.StoreMismatch) as err:
        prepare_store(changed)
    assert str(err.value) == (f"store: {cfg.store} was made from a different config (inputs.length: "
                              f"8 -> 6; inputs.seed: 0 -> 3) — use a new --store path or the "
                              f"original config")
    assert _snapshot(cfg.store) == before
    prepare_store(cfg)                   # the same config reopens it, still untouched
    assert _snapshot(cfg.store) == before


def test_non_store_directory_is_refused(tiny_checkpoints, tmp_path):
    (tmp_path / "run.zarr").mkdir()
    (tmp_path / "run.zarr" / "notes.txt").write_text("mine")
    with pytest.raises(st.StoreMismatch, match="exists and is not a tdos store — choose another path"):
        prepare_store(_cfg(tiny_checkpoints, tmp_path))
    assert os.listdir(tmp_path / "run.zarr") == ["notes.txt"]


def _mamba_group(tmp_path):
    root = zarr.open_group(str(tmp_path / "m.zarr"), mode="w")
    g = st.create_group(root, "m", identity={"arch": "mamba"}, checkpoint={}, dtype="float64",
                        inputs={"sequences": 2, "length": 10, "seed": 0, "text": None,
                                "token_block": 4},
                        layer_lengths=((0, 10), (2, 5)), token_block=4,
                        tokens=np.zeros((2, 10), np.int64), d_model=3,
                        layer_kinds=["mamba"] * 3, a_log_shapes=[[6, 2]] * 3)
    return str(tmp_path / "m.zarr"), g


def test_write_block_touches_only_its_chunks(tmp_path):
    path, g = _mamba_group(tmp_path)
    assert g["eigenvalues"].dtype == np.complex128 and g["delta"].chunks == (1, 1, 4, 6)
    eig = (np.arange(12) + 1j).reshape(4, 3)               # (T, d)
    delta = np.full((4, 6), 0.5)                           # (T, d_inner)
    scale = (np.full(4, 0.999), np.full(4, 1e-6))         # ρ (T,), r (T,)
    shift = (np.full(4, 1.0), np.full(4, 1e-8))           # along 𝟙/√d
    values = BlockValues(eig, delta, scale, shift, eig_backend="scipy-openblas",
                         jacobian_path="generic")
    assert is_usable(st.write_block(g, 1, 0, 1, 4, values))
    gp = os.path.join(path, "m")
    assert _chunk_files(gp, "eigenvalues") == {"1/0/1/0"}
    assert _chunk_files(gp, "delta") == {"1/0/1/0"}
    assert _chunk_files(gp, "scale_rayleigh") == _chunk_files(gp, "scale_residual") == {"1/0/1"}
    assert _chunk_files(gp, "shift_rayleigh") == _chunk_files(gp, "shift_residual") == {"1/0/1"}
    assert g["scale_residual"].dtype == np.float64 and g["scale_rayleigh"].chunks == (1, 1, 4)
    assert _chunk_files(gp, "ledger") == _chunk_files(gp, "eig_backend") == {"1/0/1"}
    assert _chunk_files(gp, "jacobian_path") == {"1/0/1"}
    once = _snapshot(gp)
    assert is_usable(st.write_block(g, 1, 0, 1, 4, values))   # idempotent rewrite
    assert {k: v[0] for k, v in _snapshot(gp).items()} == {k: v[0] for k, v in once.items()}
    e = g["eigenvalues"][...]
    np.testing.assert_array_equal(e[1, 0, 4:8], eig)
    assert np.isnan(e).sum() == e.size - eig.size
    np.testing.assert_array_equal(g["scale_rayleigh"][1, 0, 4:8], scale[0])
    assert np.isnan(g["scale_residual"][...]).sum() == 2 * 2 * 10 - 4
    np.testing.assert_array_equal(g["shift_residual"][1, 0, 4:8], shift[1])
    assert np.isnan(g["shift_rayleigh"][...]).sum() == 2 * 2 * 10 - 4
    np.testing.assert_array_equal(g["ledger"][...].ravel(), [0] * 7 + [1] + [0] * 4)
    np.testing.assert_array_equal(g["eig_backend"][...].ravel(), [0] * 7 + [2] + [0] * 4)
    np.testing.assert_array_equal(g["jacobian_path"][...].ravel(), [0] * 7 + [2] + [0] * 4)


def test_non_finite_block_is_flagged(tmp_path):
    _, g = _mamba_group(tmp_path)
    eig = np.ones((2, 3), complex)
    eig[1, 2] = np.inf
    assert is_flagged(st.write_block(g, 0, 1, 2, 8, BlockValues(eig, np.ones((2, 6)))))
    assert is_flagged(g["ledger"][0, 1, 2])


def test_a_log_bookkeeping(tmp_path):
    _, g = _mamba_group(tmp_path)
    assert Ledger.read(g).missing_a_log == (0, 1, 2)
    st.write_a_log(g, 1, np.zeros((6, 2)))
    assert Ledger.read(g).missing_a_log == (0, 2)


def test_a_log_of_a_hybrid_counts_only_its_mamba_layers(tmp_path):
    """Mamba-2 layers of a hybrid: one A per head, attention layers never have one."""
    root = zarr.open_group(str(tmp_path / "h.zarr"), mode="w")
    g = st.create_group(root, "h", identity={"arch": "bamba"}, checkpoint={}, dtype="float32",
                        inputs={"sequences": 1, "length": 4, "seed": 0}, layer_lengths=((1, 4),),
                        token_block=4, tokens=np.zeros((1, 4), np.int64), d_model=3,
                        layer_kinds=["mamba2", "attention", "mamba2"],
                        a_log_shapes=[[5], None, [5]])
    assert g["a_log"].shape == (3, 5, 1) and g["delta"].shape == (1, 1, 4, 5)
    assert Ledger.read(g).missing_a_log == (0, 2)
    st.write_a_log(g, 2, np.arange(5.0))
    assert Ledger.read(g).missing_a_log == (0,)
    np.testing.assert_array_equal(g["a_log"][2, :, 0], np.arange(5.0))


def test_planned_mask_follows_layer_length(tmp_path):
    _, g = _mamba_group(tmp_path)
    led = Ledger.read(g)
    np.testing.assert_array_equal(led.planned[:, 0], [[1, 1, 1], [1, 1, 0]])   # (R, nb)
    assert (led.total, led.done, led.flagged) == (2 * 5, 0, 0)
    g["ledger"][1, 0, 1] = FLAGGED
    g["ledger"][0, 1, 0] = DONE
    led = Ledger.read(g)
    assert (led.total, led.done, led.flagged) == (10, 2, 1)      # flagged blocks are done
    assert (1, 0, 1) not in led.pending() and len(led.pending()) == 8


def test_plan_lists_only_unfinished_blocks_layer_by_layer(tiny_checkpoints, tmp_path):
    cfg = _cfg(tiny_checkpoints, tmp_path)
    root = prepare_store(cfg)
    every = plan(cfg, root)
    assert not any(isinstance(t, ALogTask) for t in every)
    # each model's residual stream first: its two sequences in one task, every row from the
    # embedding
    streams = [t for t in every if isinstance(t, ResidualTask)]
    assert [(t.model.group, t.seqs, t.rows, t.start) for t in streams] == [
        ("gpt2", (0, 1), ((0, 0), (1, 1)), None), ("llama", (0, 1), ((0, 1),), None)]
    for t in streams:                                          # before the model's blocks
        assert every.index(t) < min(i for i, b in enumerate(every) if isinstance(b, BlockTask)
                                    and b.model.group == t.model.group)
    tasks = [t for t in every if isinstance(t, BlockTask)]
    gpt2 = [(t.seq, t.layer, t.block, t.t0, t.t1) for t in tasks if t.model.group == "gpt2"]
    assert gpt2 == [(s, layer, b, 4 * b, 4 * b + 4) for layer in (0, 1) for s in (0, 1) for b in (0, 1)]
    llama = [(t.seq, t.layer, t.block, t.t0, t.t1, t.n_ctx) for t in tasks if t.model.group == "llama"]
    assert llama == [(0, 1, 0, 0, 4, 6), (0, 1, 1, 4, 6, 6), (1, 1, 0, 0, 4, 6), (1, 1, 1, 4, 6, 6)]
    root["gpt2"]["ledger"][1, 0, 1] = DONE
    root["gpt2"]["ledger"][0, 1, 0] = FLAGGED
    again = {(t.layer, t.seq, t.block) for t in plan(cfg, root)
             if t.model.group == "gpt2" and isinstance(t, BlockTask)}
    assert len(again) == 6 and (1, 0, 1) not in again and (0, 1, 0) not in again
    assert all(isinstance(t, BlockTask) for t in tasks)
    # a stored row is where a stream starts: sequence 1 has layer 0's h, and only misses layer 1
    st.write_residual(root["gpt2"], 0, 1, np.zeros((8, 32), np.float32))
    streams = [(t.seqs, t.rows, t.start) for t in plan(cfg, root)
               if isinstance(t, ResidualTask) and t.model.group == "gpt2"]
    assert streams == [((0,), ((0, 0), (1, 1)), None), ((1,), ((1, 1),), (0, 0))]


def test_tasks_carry_cpu_linalg_outside_the_fingerprint(tiny_checkpoints, tmp_path):
    """compute.cpu_linalg reaches every task's worker and, like compute.device, may change
    between runs of one store (results differ at rounding level only)."""
    cfg = _cfg(tiny_checkpoints, tmp_path)
    root = prepare_store(cfg)
    assert {t.model.cpu_linalg for t in plan(cfg, root)} == {"auto"}
    pinned = dataclasses.replace(cfg, compute=dataclasses.replace(cfg.compute, cpu_linalg="openblas"))
    root = prepare_store(pinned)                             # the same store accepts it
    assert {t.model.cpu_linalg for t in plan(pinned, root)} == {"openblas"}


def _with_tokenizer(ck, tmp_path):
    """A copy of the tiny GPT-2 with a word-level tokenizer of its 64-token vocabulary."""
    import shutil

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    d = tmp_path / "gpt2-tok"
    shutil.copytree(ck["gpt2"], d)
    vocab = {f"w{i}": i for i in range(63)} | {"[UNK]": 63}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(d)
    return d


def test_text_inputs_are_consecutive_windows(tiny_checkpoints, tmp_path):
    d = _with_tokenizer(tiny_checkpoints, tmp_path)
    ids = [(7 * i) % 70 for i in range(40)]           # ids >= 63 are unknown words -> [UNK]
    (tmp_path / "corpus.txt").write_text(" ".join(f"w{i}" for i in ids))
    cfg = config_from_dict({"model": {"path": str(d)}, "inputs": {"sequences": 3, "length": 8,
                                                                 "text": "corpus.txt"},
                            "layers": [0], "store": str(tmp_path / "t.zarr")}, base_dir=tmp_path)
    g = prepare_store(cfg)["gpt2-tok"]
    want = np.minimum(ids[:24], 63).reshape(3, 8)
    np.testing.assert_array_equal(g["tokens"][...], want)
    corpus = (tmp_path / "corpus.txt").read_text()             # the store says what was read
    assert g.attrs["inputs"]["text_files"] == [str(tmp_path / "corpus.txt")]
    assert g.attrs["inputs"]["text_sha256"] == hashlib.sha256(corpus.encode()).hexdigest()


def _as_format_1(path) -> None:
    """Rewrite a fresh store into what format 1 wrote: no eig_backend, no shift_* arrays,
    no creation_id, software or checkpoint record."""
    import shutil

    root = zarr.open_group(str(path), mode="r+")
    for name in root.attrs["models"]:
        for array in ("eig_backend", "shift_rayleigh", "shift_residual"):
            shutil.rmtree(os.path.join(path, name, array))
        attrs = root[name].attrs.asdict()
        del attrs["checkpoint"]
        root[name].attrs.clear()
        root[name].attrs.update(attrs)
    attrs = {k: v for k, v in root.attrs.asdict().items() if k not in ("creation_id", "software")}
    root.attrs.clear()
    root.attrs.update({**attrs, "tdos_format": 1})


def test_older_format_gets_one_message_and_upgrades(tiny_checkpoints, tmp_path, capsys):
    from analysis import StoreError, open_store
    from sweep.cli import main

    cfg = _cfg(tiny_checkpoints, tmp_path)
    prepare_store(cfg)
    g = zarr.open_group(cfg.store, path="gpt2", mode="r+")
    eig = (np.arange(4 * 32) + 1j).reshape(4, 32)
    st.write_block(g, 0, 1, 1, 4, BlockValues(eig, scale=(np.ones(4), np.zeros(4))))
    _as_format_1(cfg.store)
    want = (f"is a tdos store of format 1; this tdos reads format {FORMAT}: run `tdos upgrade "
            f"{cfg.store}` once")
    with pytest.raises(StoreError, match=f"format 1; this tdos reads format {FORMAT}") as e:
        open_store(cfg.store)
    assert want in str(e.value)
    with pytest.raises(st.StoreMismatch) as e:
        prepare_store(cfg)
    assert want in str(e.value)
    assert main(["status", cfg.store]) == 2 and want in capsys.readouterr().err

    assert main(["upgrade", cfg.store]) == 0
    assert capsys.readouterr().out == f"{cfg.store}: format {FORMAT} (was 1)\n"
    s = open_store(cfg.store)
    np.testing.assert_array_equal(s.eigenvalues(0, 1)[4:], eig)          # values kept
    np.testing.assert_array_equal(s.scale_direction(0, 1)[0][4:], 1.0)
    assert np.isnan(s.shift_direction(0, 1)[0]).all()                     # not computed
    assert (s.eig_backend(0) == "unknown").all()
    assert s.layer_kinds == ["attention", "attention"]
    root = prepare_store(cfg)                          # the sweep resumes on the upgraded store
    # every block but the one written, and one residual stream per model
    assert root.attrs["upgraded_from"] == 1 and len(plan(cfg, root)) == 2 * 2 * 2 - 1 + 4 + 2
    assert main(["upgrade", cfg.store]) == 0 and f"format {FORMAT} already" in capsys.readouterr().out
    zarr.open_group(cfg.store, mode="r+").attrs["tdos_format"] = 99
    with pytest.raises(StoreError, match=f"tdos_format 99, which this tdos .format {FORMAT}. cannot read"):
        open_store(cfg.store)


def test_checkpoint_changed_since_creation_is_refused(tiny_checkpoints, tmp_path):
    import shutil

    from sweep.errors import CheckpointChanged

    ckpt = tmp_path / "gpt2"
    shutil.copytree(tiny_checkpoints["gpt2"], ckpt)
    cfg = config_from_dict({"model": {"path": str(ckpt)}, "layers": [0], "store": str(tmp_path / "r.zarr"),
                            "inputs": {"sequences": 1, "length": 4}})
    prepare_store(cfg)
    weights = ckpt / "model.safetensors"
    os.utime(weights, ns=(1, 1))                 # touched, same bytes: the hash says unchanged
    prepare_store(cfg)
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1                                # one bit of one weight
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointChanged, match="model.safetensors changed since the store was made"):
        prepare_store(cfg)


def test_edited_config_json_is_refused(tiny_checkpoints, tmp_path):
    """config.json decides every J_tt (here layer_norm_epsilon 1e-5 -> 0.5): an edited one is
    another model, refused like edited weights, complete store or not."""
    import json
    import shutil

    from sweep.errors import CheckpointChanged

    ckpt = tmp_path / "gpt2"
    shutil.copytree(tiny_checkpoints["gpt2"], ckpt)
    cfg = config_from_dict({"model": {"path": str(ckpt)}, "layers": [0], "store": str(tmp_path / "r.zarr"),
                            "inputs": {"sequences": 1, "length": 4}})
    prepare_store(cfg)
    conf = json.loads((ckpt / "config.json").read_text())
    conf["layer_norm_epsilon"] = 0.5
    (ckpt / "config.json").write_text(json.dumps(conf))
    with pytest.raises(CheckpointChanged, match="config.json changed since the store was made"):
        prepare_store(cfg)


def test_henrici_departure_is_zero_for_a_normal_matrix_and_known_for_a_jordan_block():
    from sweep.numerics.spectra import henrici

    """sqrt(max(0, ‖J‖_F² − Σ|ζ|²)) / ‖J‖_F: 0 for a symmetric matrix; sqrt(a²/(2 + a²)) for
    [[1, a], [0, 1]] (‖J‖_F² = 2 + a², both eigenvalues 1)."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(6, 6))
    sym = a + a.T
    jordan = np.array([[1.0, 3.0], [0.0, 1.0]])
    for J, want in ((sym, 0.0), (jordan, np.sqrt(9 / 11))):
        got = henrici(np.array([(J ** 2).sum()]), np.linalg.eigvals(J)[None])
        np.testing.assert_allclose(got, [want], atol=1e-7)
