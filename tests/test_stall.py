"""A sweep never hangs silently and never floods (issue 45), on real local clusters.

- the budget's process term is a worker's measured footprint, and the budget holds the need
  against Dask's pause threshold, not the raw memory_limit;
- a worker paused for memory is named, and a sweep none of whose workers can run stops
  with that line (no timing is asserted: pytest's timeout bounds each test);
- a scheduler with no worker attached stops the sweep after compute.stall_after;
- failing tasks give one console line per (model, layer, kind), with the count, and their
  tracebacks go to STORE.log.
"""
from __future__ import annotations

import dataclasses
import json
import os

import dask
import pytest
import yaml
import zarr
from distributed import Client, LocalCluster

from sweep.config.load import config_from_dict
from sweep.format.ledger import is_done
from sweep.run import run_sweep

pytestmark = pytest.mark.timeout(300)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _doc(ck, store, **compute) -> dict:
    return {"model": {"path": str(ck), "dtype": "float32"},
            "inputs": {"sequences": 2, "length": 8, "seed": 0}, "layers": [0, 1],
            "store": str(store), "compute": {"token_block": 4, "live_every": 0, **compute}}


def _fresh_worker_rss(path) -> int:
    """On a worker: load a model through the worker's own code, then its resident memory."""
    import psutil

    from sweep.worker.model import load_model

    load_model(path, dtype="float32")
    return psutil.Process().memory_info().rss


def test_the_process_term_is_a_fresh_workers_measured_rss(tiny_checkpoints, tmp_path, monkeypatch):
    """Measured once per environment (the user's cache: the suite measures at most once) and
    kept under the environment's key; a real worker process that has loaded a tiny model
    through tdos' loader holds within 15 % of it. A cached figure is used as it is."""
    from sweep import process

    term = process.process_term()
    assert term.source.startswith("measured") and str(process.cache_file()) in term.source
    assert json.loads(process.cache_file().read_text())[process.environment_key()] == term.bytes
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, scheduler_port=0,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        rss = client.submit(_fresh_worker_rss, str(tiny_checkpoints["gpt2"]), pure=False).result()
    assert abs(term.bytes - rss) <= 0.15 * rss, (term.bytes / 2**20, rss / 2**20)
    monkeypatch.setenv("TDOS_CACHE", str(tmp_path / "cache"))
    process.cache_file().parent.mkdir(parents=True)
    process.cache_file().write_text(json.dumps({process.environment_key(): 123 << 20}))
    again = process.process_term()
    assert again.bytes == 123 << 20 and again.source.startswith("measured once")


def test_a_need_over_the_pause_threshold_is_refused_in_one_line(tiny_checkpoints, tmp_path):
    """A limit that holds the need but not pause x limit is refused, naming the limit, the
    threshold, the need and the fix; the same need under a higher pause fraction passes."""
    from sweep.budget import size_sweep
    from sweep.plan.make import make_plan

    plan = make_plan(config_from_dict(_doc(tiny_checkpoints["gpt2"], tmp_path / "run.zarr")))
    need = size_sweep(plan, workers=1).worker_bytes
    limit = int(need / 0.9)                          # need = 90 % of the limit
    cfg = plan.config
    cfg = dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, memory_limit=limit))
    plan = dataclasses.replace(plan, config=cfg)
    with dask.config.set({"distributed.worker.memory.pause": 0.8}):
        why = size_sweep(plan, workers=1).refusal()
    assert why and "\n" not in why and why.startswith("cluster.memory_limit: ")
    assert "distributed.worker.memory.pause = 0.8" in why and "raise memory_limit to at least" in why
    with dask.config.set({"distributed.worker.memory.pause": 0.95}):
        assert size_sweep(plan, workers=1).refusal() is None
        assert "stops a worker at 95% of it" in size_sweep(plan, workers=1).table()


def test_the_560MB_tiny_sweep_is_refused_or_stopped_with_a_memory_line(tmp_path, capsys):
    """configs/tiny.yaml on one worker of 560MB (issue 45's hang): either the budget refuses it,
    or the paused worker is named and the sweep stops, or it completes."""
    from sweep.cli import main

    doc = yaml.safe_load(open(os.path.join(REPO, "configs", "tiny.yaml")))
    doc["model"]["path"] = os.path.join(REPO, "checkpoints", "tiny-mamba-bytes")
    doc["store"] = str(tmp_path / "tiny.zarr")
    doc["compute"].update(live_every=0, stall_after=5)
    doc["cluster"] = {"kind": "local", "workers": 1, "memory_limit": "560MB"}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(doc))
    code = main(["sweep", str(tmp_path / "tiny.yaml")])
    out, err = capsys.readouterr()
    if code == 2:
        assert "distributed.worker.memory.pause" in err and err.count("\n") == 1
    elif code == 1:
        assert "every worker is paused for memory" in out and "of its 534 MiB limit" in out
        assert f"rerun `tdos sweep {tmp_path / 'tiny.yaml'} --resume`" in out
    else:
        assert code == 0 and "sweep complete: 16/16" in out


def test_a_paused_worker_is_named_and_the_sweep_stops(tiny_checkpoints, tmp_path):
    """The worker's Dask config pauses it at 5 % of its 2 GB limit, which a worker passes
    once torch is imported: it is named (memory, limit, its task), the sweep stops with that
    line, and what it wrote is kept."""
    cfg = config_from_dict(_doc(tiny_checkpoints["gpt2"], tmp_path / "run.zarr", stall_after=2))
    with dask.config.set({"distributed.worker.memory.pause": 0.05}), \
            LocalCluster(n_workers=1, threads_per_worker=1, processes=True, scheduler_port=0,
                         dashboard_address=":0", memory_limit="2GB") as cluster, \
            Client(cluster) as client:
        worker = next(iter(client.scheduler_info()["workers"]))
        result = run_sweep(cfg, client=client, progress=False)
    assert result.exit_code == 1 and result.stalled
    assert "every worker is paused for memory" in result.stalled and worker in result.stalled
    assert "MiB of its 1907 MiB limit" in result.stalled
    ledger = zarr.open_group(cfg.store, mode="r")["gpt2"]["ledger"][...]
    assert int(is_done(ledger).sum()) == result.done < result.total


def test_a_scheduler_with_no_worker_stops_the_sweep(tiny_checkpoints, tmp_path):
    cfg = config_from_dict(_doc(tiny_checkpoints["gpt2"], tmp_path / "run.zarr", stall_after=1))
    with LocalCluster(n_workers=0, scheduler_port=0, dashboard_address=":0") as cluster:
        result = run_sweep(cfg, scheduler=cluster.scheduler_address, progress=False)
    assert result.exit_code == 1 and result.done == 0
    assert result.stalled.startswith(f"no worker attached to the scheduler at {cluster.scheduler_address}")


def _break_blocks():
    from sweep.worker import block

    def broken(state, model, t, plan):
        raise RuntimeError("broken on purpose")
    block.compute = broken


def test_failing_tasks_give_one_line_per_layer_and_kind(tiny_checkpoints, tmp_path, capfd):
    """Every block task fails (after its retries): the console holds one `failed:` line per
    layer with the count and no traceback; the log holds every traceback."""
    cfg = config_from_dict(_doc(tiny_checkpoints["gpt2"], tmp_path / "run.zarr"))
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, scheduler_port=0,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        client.run(_break_blocks)
        result = run_sweep(cfg, client=client, progress=False)
    cap = capfd.readouterr()
    failed = [line for line in cap.out.splitlines() if line.startswith("failed: ")]
    assert result.exit_code == 1 and len(result.errors) == 8          # 2 layers x 2 seqs x 2 blocks
    log = f"{cfg.store}.log"
    assert failed == [f"failed: gpt2 layer {layer}, the block's J_tt: RuntimeError: broken on purpose "
                      f"(4 tasks; tracebacks in {log})" for layer in (0, 1)]
    assert "Traceback" not in cap.out + cap.err
    text = open(log).read()
    assert text.count("Traceback (most recent call last)") >= 8 and "in broken" in text
