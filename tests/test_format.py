"""The store format's own facts: the ledger's one reading of its codes, and the dtype table
against numpy's and torch's own dtypes and against every module that reads it."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from analysis.spectrum.rates import marginal_threshold
from sweep.format import dtypes, schema
from sweep.format.ledger import (DONE, FLAGGED, PENDING, Ledger, code_for, is_done, is_flagged,
                                 is_pending, is_usable)
from sweep.generic import selfcheck
from sweep.numerics.dtypes import complex_of, row_of, torch_dtype
from sweep.numerics.spectra import eigvals

UNPLANNED = -1          # how Ledger.unplanned_marked marks cells beyond a row's length


def test_each_code_has_one_reading():
    cells = np.array([UNPLANNED, PENDING, DONE, FLAGGED], np.int8)
    assert is_pending(cells).tolist() == [False, True, False, False]
    assert is_done(cells).tolist() == [False, False, True, True]       # flagged blocks are done
    assert is_flagged(cells).tolist() == [False, False, False, True]
    assert is_usable(cells).tolist() == [False, False, True, False]    # values read: DONE only
    assert is_usable(code_for(True)) and is_done(code_for(False)) and is_flagged(code_for(False))
    assert not is_usable(code_for(False))
    assert bool(is_pending(np.int8(0))) and not bool(is_done(np.int8(0)))   # one cell, as read


def test_the_ledger_counts_planned_cells_with_flagged_ones_done():
    # 2 rows, 1 sequence, 3 blocks; row 1 plans 2 blocks only
    cells = np.array([[[DONE, FLAGGED, PENDING]], [[PENDING, DONE, PENDING]]], np.int8)
    planned = np.array([[[True, True, True]], [[True, True, False]]])
    led = Ledger(cells, planned, np.array([0, 1]), np.array([3, 2]), np.zeros((2, 1), np.int8))
    assert (led.total, led.done, led.flagged) == (5, 3, 1)
    assert led.pending() == [(0, 0, 2), (1, 0, 0)]
    assert led.row_counts(0) == (2, 1, 3) and led.row_counts(1) == (1, 0, 2)
    assert led.unplanned_marked[1, 0, 2] == UNPLANNED and not is_done(led.unplanned_marked).all()


@pytest.mark.parametrize("name", dtypes.NAMES)
def test_every_dtype_row_agrees_with_numpy_and_torch(name):
    d = dtypes.row(name)
    # eps and bytes are read from numpy; the complex partner is the table's own word
    assert np.dtype(d.complex) == np.result_type(d.numpy, np.complex64)
    assert d.complex_bytes == np.dtype(d.complex).itemsize == 2 * d.bytes
    assert dtypes.of(name) is d and dtypes.of(d.complex) is d and dtypes.of(np.dtype(d.complex)) is d
    t = torch_dtype(name)
    assert t == getattr(torch, name) and t.itemsize == d.bytes and torch.finfo(t).eps == d.eps
    assert row_of(t) is d and complex_of(t).itemsize == d.complex_bytes
    assert eigvals(torch.eye(3, dtype=t)[None]).dtype == complex_of(t)


@pytest.mark.parametrize("name", dtypes.NAMES)
def test_every_reader_takes_its_bound_from_the_table(name):
    d = dtypes.row(name)
    # the analysis reads a store's complex eigenvalues: the floor is its compute dtype's
    assert marginal_threshold(d.complex) == marginal_threshold(name) == d.marginal
    assert selfcheck.bound(torch_dtype(name)) == d.selfcheck
    assert schema.dtype_of("eigenvalues", name) == d.complex
    assert schema.dtype_of("residual", name) == name
    # the bounds shrink with the precision
    assert d.marginal < 1e-8 and d.held_prefix < d.selfcheck


def test_a_dtype_outside_the_table_is_refused_by_name():
    with pytest.raises(ValueError, match="float16.*float32 or float64"):
        dtypes.row("float16")
    with pytest.raises(ValueError, match="float16"):
        torch_dtype("float16")
    with pytest.raises(ValueError):
        dtypes.of("int8")
    # the config's message lists the table's names: tests/test_config.py ("bad_dtype")
