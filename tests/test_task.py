"""sweep.worker.task on the worker side: one J_tt buffer per thread (its WorkerState's), across
tasks; TF32 off and the eigensolver recorded for every task."""
from __future__ import annotations

import threading

import torch

from sweep.worker.state import WorkerState

CPU = torch.device("cpu")


def test_jacobian_buffer_is_reused_and_regrown():
    _jacobian_buffer = WorkerState().jacobian_buffer
    a = _jacobian_buffer(8, 16, torch.float32, CPU)
    assert a.shape == (8, 16, 16) and a.dtype == torch.float32
    b = _jacobian_buffer(3, 16, torch.float32, CPU)             # a shorter last block: same memory
    assert b.shape == (3, 16, 16) and b.data_ptr() == a.data_ptr()
    c = _jacobian_buffer(3, 16, torch.float64, CPU)             # fp64 rerun: its own buffer
    assert c.dtype == torch.float64 and c.shape == (3, 16, 16)
    d = _jacobian_buffer(12, 16, torch.float32, CPU)            # larger block: regrown
    assert d.shape == (12, 16, 16) and d.dtype == torch.float32


def test_jacobian_buffer_is_per_thread():
    """A worker with several threads runs several tasks at once: no shared buffer."""
    _jacobian_buffer = WorkerState().jacobian_buffer
    mine = _jacobian_buffer(4, 16, torch.float32, CPU).data_ptr()
    theirs = []
    t = threading.Thread(target=lambda: theirs.append(
        _jacobian_buffer(4, 16, torch.float32, CPU).data_ptr()))
    t.start()
    t.join()
    assert theirs[0] != mine


def test_every_task_switches_tf32_off_and_reports_its_eigensolver(tiny_checkpoints, tmp_path):
    """A worker process that had TF32 on (a library's default, or user code) runs the task
    with it off: strict_fp32 runs at the start of every task, whatever the device."""
    from analysis import open_store
    from sweep.config.load import config_from_dict
    from sweep.plan.make import make_plan
    from sweep.store.writer import open_store as prepare_store
    from sweep.tasks import BlockTask, ResidualTask, pending_tasks
    from sweep.worker.task import run_task

    cfg = config_from_dict({"model": {"path": str(tiny_checkpoints["gpt2"])}, "layers": [1],
                            "inputs": {"sequences": 1, "length": 4}, "store": str(tmp_path / "r.zarr"),
                            "compute": {"token_block": 4, "cpu_linalg": "openblas"}})
    plan = make_plan(cfg)
    tasks, state = pending_tasks(plan, prepare_store(plan)), WorkerState()
    for t in tasks:
        if isinstance(t, ResidualTask):
            run_task(t, state=state)
    task = next(t for t in tasks if isinstance(t, BlockTask))
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        result = run_task(task, state=state)
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    assert result["eig_backend"] == "scipy-openblas"
    assert result["jacobian_path"] == ("hand-written" if task.model.engine == "fast" else "generic")
    assert result["software"]["torch"] == torch.__version__
    assert open_store(cfg.store).eig_backend(1).tolist() == [["scipy-openblas"]]
