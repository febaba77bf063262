"""Worker-side memory reuse in sweep.task: one J_tt buffer per thread, across tasks."""
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
