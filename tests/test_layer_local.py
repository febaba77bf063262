"""Layer-local sweeps on real worker processes (sweep/worker/resident.py, docs/scale.md).

A sharded LLaMA (several safetensors files and the index; the hand-written fast path) and an
unsharded Mamba-2 (the generic path), float64, four layers each: every stored h_l equals the
input of that layer in transformers' own whole-model forward, and every token's eigenvalues
equal those of the diagonal block of autograd of the unmodified layer over the whole sequence
(tests/oracle.py), the independent oracle, as do ‖J_tt‖_F² and J_tt's departure from normality. A resumed sweep reuses the stored residual (the
residual tasks report their layer calls), a worker reads each layer once for all of its
blocks, and a checkpoint file that differs from the store's record is refused by the worker.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json

import numpy as np
import pytest
import torch
import zarr
from conftest import local_client
from families import DEEPEST, FAMILIES, tolerance
from oracle import layer_input, matched_eigvals_error, oracle_model, sequence_jacobian

from analysis import open_store
from sweep.config.load import config_from_dict
from sweep.numerics.spectra import eigvals
from sweep.run import run_sweep

LAYERS, SEQS, L = [1, 3], 2, 6
GROUPS = ("llama-float64", "mamba2-float64")             # the store's model groups


def _save(name: str, root, shard: str | None = None):
    from conftest import _perturb
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = FAMILIES[name]()
    config.num_hidden_layers = 4
    model = AutoModelForCausalLM.from_config(config).eval()
    _perturb(model, torch.Generator().manual_seed(1))
    kw = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(root / name, **kw)
    return root / name


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("local")
    llama = _save("llama", root, shard="40KB")
    files = set(json.loads((llama / "model.safetensors.index.json").read_text())["weight_map"].values())
    assert len(files) > 2
    return {"llama": llama, "mamba2": _save("mamba2", root)}


def _doc(checkpoints, store, **compute) -> dict:
    return {"models": [{"path": str(checkpoints["llama"]), "dtype": "float64"},
                       {"path": str(checkpoints["mamba2"]), "dtype": "float64"}],
            "inputs": {"sequences": SEQS, "length": L, "seed": 3}, "layers": LAYERS,
            "store": str(store), "compute": {"token_block": 4, "live_every": 0, **compute}}


@pytest.fixture(scope="module")
def one_worker():
    with local_client(1) as c:
        yield c


@pytest.fixture(scope="module")
def swept(checkpoints, one_worker, tmp_path_factory):
    cfg = config_from_dict(_doc(checkpoints, tmp_path_factory.mktemp("s") / "run.zarr"))
    result = run_sweep(cfg, client=one_worker, progress=False)
    assert result.exit_code == 0, result.errors
    return cfg, result


def test_the_sweep_is_layer_local_and_equals_the_whole_model_oracle(checkpoints, swept):
    cfg, result = swept
    blocks = [r for r in result.results if "block" in r]
    assert blocks and {r["route"] for r in result.results if "route" in r} == {"layer-local"}
    assert {r["jacobian_path"] for r in blocks if r["model"] == "llama-float64"} == {"hand-written"}
    assert {r["jacobian_path"] for r in blocks if r["model"] == "mamba2-float64"} == {"generic"}
    # the hand-written LLaMA takes its rotary tables in float64, transformers' in float32
    # (test_families: 7e-8 on J_tt); Mamba-2's decay and state are float32 inside transformers
    bound = {"llama": 1e-6, "mamba2": tolerance("mamba2", eigenvalues=True)}
    for name in ("llama", "mamba2"):
        g = zarr.open_group(cfg.store, path=f"{name}-float64", mode="r")
        st = open_store(cfg.store, model=f"{name}-float64")
        model = oracle_model(checkpoints[name])
        for row, layer in enumerate(LAYERS):
            for seq in range(SEQS):
                ids = torch.from_numpy(g["tokens"][seq])
                want_h = layer_input(model, layer, ids).numpy()                  # (L, d)
                got_h = g["residual"][row, seq]
                assert np.abs(got_h - want_h).max() <= 1e-12 * np.abs(want_h).max(), (name, layer)
                _, J = sequence_jacobian(model, layer, ids)                     # (L, d, L, d)
                diag = torch.stack([J[t, :, t, :] for t in range(L)])           # (L, d, d)
                err = matched_eigvals_error(g["eigenvalues"][row, seq], eigvals(diag).numpy())
                assert err <= bound[name], (name, layer, seq, err)
                # ‖J_tt‖_F² and Henrici's departure from normality, from the oracle's blocks
                fro2 = diag.square().sum((1, 2)).numpy()
                np.testing.assert_allclose(st.frobenius2(layer, seq), fro2, rtol=bound[name])
                want = np.sqrt(np.maximum(fro2 - (eigvals(diag).abs() ** 2).sum(1).numpy(), 0) / fro2)
                np.testing.assert_allclose(st.nonnormality(layer, seq), want, rtol=0, atol=1e-5)


def test_one_worker_reads_each_layer_once_for_all_its_blocks(swept):
    """Blocks come layer by layer: with one layer resident, the worker's block tasks read a
    layer only when the layer changes (the residual stream read them before)."""
    _, result = swept
    for name in GROUPS:
        blocks = [r for r in result.results if r.get("model") == name and "block" in r]
        assert len(blocks) == len(LAYERS) * SEQS * 2
        assert 1 <= sum(r["layer_loads"] for r in blocks) <= len(LAYERS)
    streams = [r for r in result.results if "layer_forwards" in r]
    # one task per model: both sequences through layers 0..2 (layer 3's input is layer 2's output)
    assert sorted(r["layer_forwards"] for r in streams) == [SEQS * 3, SEQS * 3]


def test_a_resumed_sweep_reuses_the_stored_residual(checkpoints, one_worker, tmp_path):
    cfg = config_from_dict(_doc(checkpoints, tmp_path / "run.zarr"))
    first = run_sweep(cfg, client=one_worker, progress=False)
    assert first.exit_code == 0
    before = {n: zarr.open_group(cfg.store, path=n, mode="r")["eigenvalues"][...] for n in GROUPS}
    root = zarr.open_group(cfg.store, mode="r+")
    # an interruption after the residual tasks: every block pending again
    for n in GROUPS:
        root[n]["ledger"][...] = 0
    again = run_sweep(cfg, client=one_worker, progress=False, resume=True)
    assert again.exit_code == 0 and again.planned == 2 * len(LAYERS) * SEQS * 2
    assert not [r for r in again.results if "layer_forwards" in r]           # nothing streamed
    for n, want in before.items():
        np.testing.assert_array_equal(root[n]["eigenvalues"][...], want)
    # layer 3's h of sequence 0 lost with its blocks: streamed from the stored layer 1 (2 calls)
    root["mamba2-float64"]["residual_ledger"][1, 0] = 0
    root["mamba2-float64"]["ledger"][1, 0] = 0
    third = run_sweep(cfg, client=one_worker, progress=False, resume=True)
    streams = [r for r in third.results if "layer_forwards" in r]
    assert third.exit_code == 0 and [(r["residual_seqs"], r["layer_forwards"]) for r in streams] == [([0], 2)]
    np.testing.assert_array_equal(root["mamba2-float64"]["eigenvalues"][...], before["mamba2-float64"])


def test_a_worker_refuses_a_checkpoint_file_unlike_the_record(checkpoints, tmp_path):
    """A worker checks the files it reads: stat equal to the record, else the sha256."""
    from sweep.errors import CheckpointChanged
    from sweep.plan.make import make_plan
    from sweep.store.writer import open_store
    from sweep.tasks import model_ref
    from sweep.worker import resident

    cfg = config_from_dict(_doc(checkpoints, tmp_path / "run.zarr"))
    plan = make_plan(cfg)
    root = open_store(plan)
    ref = model_ref(plan, plan.models[1], root)                  # mamba2: one safetensors file
    cached = resident.Resident().model(ref, "cpu")
    cached.model.resident(2)
    resident.verify(cached, ref)                                 # the recorded files
    assert cached.states.keys() == {"config.json", "model.safetensors"}
    other = dataclasses.replace(ref, stats=(), files=tuple(
        (f, "0" * 64 if f == "model.safetensors" else h) for f, h in ref.files))
    cached.states.clear()
    with pytest.raises(CheckpointChanged, match="model.safetensors on this worker differs"):
        resident.verify(cached, other)


def test_a_worker_that_cannot_hold_one_layer_falls_back_and_says_why(tmp_path):
    """A plan that expects the layer-local route (a plan made elsewhere, a worker whose
    transformers differs) on a checkpoint that cannot be held one layer at a time here: the
    worker runs the whole model, and the task's route says why."""
    from transformers import AutoModelForCausalLM

    from sweep.plan.make import Plan, make_plan
    from sweep.store.writer import open_store
    from sweep.tasks import BlockTask, ResidualTask, pending_tasks
    from sweep.worker.state import WorkerState
    from sweep.worker.task import run_task

    config = FAMILIES["rwkv"]()
    config.num_hidden_layers, config.rescale_every = 4, 2          # rescales layers 2 and 3
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "rwkv")
    cfg = config_from_dict({"model": {"path": str(tmp_path / "rwkv"), "dtype": "float64"},
                            "inputs": {"sequences": 1, "length": 4, "seed": 0}, "layers": [3],
                            "store": str(tmp_path / "run.zarr"), "compute": {"token_block": 4}})
    plan = make_plan(cfg)
    m = plan.models[0]
    assert m.info.not_local.startswith("RWKV rescales")
    # the same plan made where one layer at a time was thought possible
    plan = Plan(plan.config, (dataclasses.replace(m, info=dataclasses.replace(m.info, not_local="")),))
    tasks = pending_tasks(plan, open_store(plan))
    assert any(isinstance(t, ResidualTask) for t in tasks) and all(t.model.local for t in tasks)
    state = WorkerState()
    results = [run_task(t, state=state) for t in tasks if isinstance(t, (ResidualTask, BlockTask))]
    assert {r["route"] for r in results} == {"whole model (this worker cannot hold one layer: RWKV "
                                             "rescales its layers' weights in place on its first "
                                             "forward (rescale_every below its depth))"}
    assert results[-1]["status"] == "done"


# ---- a failure of the layer-local route (sweep/worker/route.py) -------------------------------
# The planted failures are monkeypatched into this process, so the sweep runs on an in-process
# worker (a LocalCluster of threads): the same run_task, scheduler and client as any sweep. The
# worker's WorkerState goes with the worker when the cluster closes.

@contextlib.contextmanager
def _in_process_client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, scheduler_port=0,
                      dashboard_address=":0") as cluster, Client(cluster) as c:
        yield c


def _bloom_doc(family_checkpoints, store) -> dict:
    return {"model": {"path": str(family_checkpoints["bloom"]), "dtype": "float64"},
            "inputs": {"sequences": 1, "length": 5, "seed": 2}, "layers": [DEEPEST],
            "store": str(store), "compute": {"token_block": 5, "live_every": 0}}


def _assert_exact(cfg, path) -> None:
    """The stored eigenvalues of the deepest layer equal the whole-sequence oracle's."""
    st = open_store(cfg.store, model="bloom-float64")
    ids = torch.from_numpy(np.asarray(st.tokens(0)))
    _, J = sequence_jacobian(oracle_model(path), DEEPEST, ids)
    want = eigvals(torch.stack([J[t, :, t] for t in range(len(ids))])).numpy()
    assert matched_eigvals_error(st.eigenvalues(DEEPEST, 0), want) <= tolerance("bloom", True)


def test_a_failing_injection_falls_back_to_the_whole_model_in_one_line(family_checkpoints, tmp_path,
                                                                        monkeypatch, capsys):
    from sweep.generic.local import LocalModel

    def planted(self):
        raise RuntimeError("planted: the injection fails")

    monkeypatch.setattr(LocalModel, "injected", planted)
    cfg = config_from_dict(_bloom_doc(family_checkpoints, tmp_path / "run.zarr"))
    with _in_process_client() as c:
        result = run_sweep(cfg, client=c, progress=False)
    assert result.exit_code == 0 and not result.errors
    routes = {r["route"] for r in result.results if "route" in r}
    assert routes == {"whole model (the layer-local route failed on this worker in the residual "
                      "stream: RuntimeError: planted: the injection fails)"}
    lines = [l for l in capsys.readouterr().out.splitlines() if "whole model" in l]
    assert lines == [f"bloom-float64: {routes.pop()}"]
    _assert_exact(cfg, family_checkpoints["bloom"])


def test_a_model_failing_on_both_routes_stops_the_sweep_in_one_line(family_checkpoints, tmp_path,
                                                                    monkeypatch):
    import transformers

    from sweep.errors import RouteFailed
    from sweep.generic.local import LocalModel
    from sweep.worker import resident

    def planted(*args):
        raise RuntimeError("planted")

    monkeypatch.setattr(LocalModel, "injected", planted)
    monkeypatch.setattr(resident, "whole_stream", planted)
    cfg = config_from_dict(_bloom_doc(family_checkpoints, tmp_path / "run.zarr"))
    with _in_process_client() as c, pytest.raises(RouteFailed) as e:
        run_sweep(cfg, client=c, progress=False)
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"{family_checkpoints['bloom']}: layers [{DEEPEST}], "
                                                f"the residual stream: the whole model failed too")
    assert f"RuntimeError: planted — under transformers {transformers.__version__}" in line


def test_a_wrong_stand_in_fails_the_self_check_in_one_line(family_checkpoints, tmp_path, monkeypatch,
                                                          capsys):
    """A stand-in that grows its cache layer twice per call: the no-cache calls (the residual
    stream, the self-check's whole-sequence call) are right, the decoding is not. The
    self-check's J_tt on the first block fails; the model goes whole, said in one line."""
    from sweep.generic import standin

    right = standin.StandIn.forward

    def grows_twice(self, hidden_states, *args, **kwargs):
        right(self, hidden_states, *args, **kwargs)
        return right(self, hidden_states, *args, **kwargs)

    monkeypatch.setattr(standin.StandIn, "forward", grows_twice)
    cfg = config_from_dict(_bloom_doc(family_checkpoints, tmp_path / "run.zarr"))
    with _in_process_client() as c:
        result = run_sweep(cfg, client=c, progress=False)
    assert result.exit_code == 0 and not result.errors
    lines = [l for l in capsys.readouterr().out.splitlines() if "whole model" in l]
    assert len(lines) == 1 and lines[0].startswith(
        f"bloom-float64: whole model (the layer-local route failed on this worker in the decoding "
        f"of layer {DEEPEST}: RuntimeError: "), lines
    _assert_exact(cfg, family_checkpoints["bloom"])
