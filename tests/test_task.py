"""sweep.task on the worker side: one J_tt buffer per thread, across tasks; TF32 off and
the eigensolver recorded for every task."""
from __future__ import annotations

import threading

import torch

from sweep.task import _jacobian_buffer


def test_jacobian_buffer_is_reused_and_regrown():
    h = torch.zeros(5, 16)
    a = _jacobian_buffer(8, h)
    assert a.shape == (8, 16, 16) and a.dtype == torch.float32
    b = _jacobian_buffer(3, h)                                   # a shorter last block: same memory
    assert b.shape == (3, 16, 16) and b.data_ptr() == a.data_ptr()
    c = _jacobian_buffer(3, h.double())                          # fp64 rerun: its own buffer
    assert c.dtype == torch.float64 and c.shape == (3, 16, 16)
    d = _jacobian_buffer(12, h)                                  # larger block: regrown
    assert d.shape == (12, 16, 16) and d.dtype == torch.float32


def test_jacobian_buffer_is_per_thread():
    """A worker with several threads runs several tasks at once: no shared buffer."""
    h = torch.zeros(5, 16)
    mine = _jacobian_buffer(4, h).data_ptr()
    theirs = []
    t = threading.Thread(target=lambda: theirs.append(_jacobian_buffer(4, h).data_ptr()))
    t.start()
    t.join()
    assert theirs[0] != mine


def test_every_task_switches_tf32_off_and_reports_its_eigensolver(tiny_checkpoints, tmp_path):
    """A worker process that had TF32 on (a library's default, or user code) runs the task
    with it off: strict_fp32 runs at the start of every task, whatever the device."""
    from analysis import open_store
    from sweep.config import config_from_dict
    from sweep.plan import BlockTask, plan
    from sweep.store import prepare_store
    from sweep.task import run_task

    cfg = config_from_dict({"model": {"path": str(tiny_checkpoints["gpt2"])}, "layers": [1],
                            "inputs": {"sequences": 1, "length": 4}, "store": str(tmp_path / "r.zarr"),
                            "compute": {"token_block": 4, "cpu_linalg": "openblas"}})
    task = next(t for t in plan(cfg, prepare_store(cfg)) if isinstance(t, BlockTask))
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        result = run_task(task)
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    assert result["eig_backend"] == "scipy-openblas"
    assert result["software"]["torch"] == torch.__version__
    assert open_store(cfg.store).eig_backend(1).tolist() == [["scipy-openblas"]]
