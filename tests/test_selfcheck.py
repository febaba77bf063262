"""The self-check on real worker processes: a sweep that meets a wrong derivative or an op it
cannot read stops with one line and writes nothing.

The first block of each model on each worker compares J_tt of one token with autograd of the
unmodified layer's whole-sequence call (sweep/generic/selfcheck.py). Here the workers of a
real two-process cluster are broken on purpose through `Client.run`: the structured
derivative of the Mamba-2 state update returns 0.9x its gradient, or no op is recognised
(what a transformers release renaming its kernels would do to Δ_t).
"""
from __future__ import annotations

import re

import pytest
import torch
import yaml
import zarr
from distributed import Client, LocalCluster
from families import save_family

from sweep.format.ledger import is_done
from sweep.generic import selfcheck


def _scaled_vjp():
    from sweep.generic import ssm

    vjp = ssm._vjp
    ssm._vjp = lambda *a: tuple(None if g is None else 0.9 * g for g in vjp(*a))


def _nothing_recognised():
    from sweep.generic import ssm

    ssm.op_of = lambda name, fn: None


@pytest.fixture(scope="module")
def mamba2(tmp_path_factory):
    return save_family("mamba2", tmp_path_factory.mktemp("selfcheck"), torch.Generator().manual_seed(0))


@pytest.mark.parametrize("breakage, said", [
    (_scaled_vjp, "generic path's J_tt differs from autograd of transformers' unmodified layer by"),
    (_nothing_recognised, "no call of the decode step was recognised as mamba_ssm's selective_state_update"),
])
def test_a_broken_worker_stops_the_sweep_with_one_line(mamba2, tmp_path, capfd, breakage, said):
    """Everything the process and its workers print (file descriptors, not sys.stderr): after
    the progress bar at most 5 lines, the reason among them with both versions, and no
    traceback; the tracebacks are in the log beside the store."""
    import torch
    import transformers

    from sweep.cli import main

    store = tmp_path / "run.zarr"
    doc = {"model": {"path": str(mamba2), "dtype": "float64"},
           "inputs": {"sequences": 1, "length": 6, "seed": 0}, "layers": "all", "store": str(store),
           "compute": {"token_block": 3, "live_every": 0, "engine": "generic"}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(doc))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, scheduler_port=0,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        client.run(breakage)
        code = main(["sweep", str(tmp_path / "run.yaml"), "--scheduler", cluster.scheduler_address])
    cap = capfd.readouterr()
    shown = (cap.out + cap.err).replace("\r", "\n").splitlines()
    after_bar = shown[max(i for i, line in enumerate(shown) if line.startswith("blocks:")) + 1:]
    err = [line for line in after_bar if line.startswith("tdos:")]
    assert code == 2
    assert len(after_bar) <= 5 and "Traceback" not in cap.out + cap.err, after_bar
    assert len(err) == 1 and said in err[0], err
    # each worker checks its first block: layer 0 or layer 1, whichever worker reports first
    assert re.search(r"layer [01] \(mamba2\)", err[0])
    assert f"torch {torch.__version__} and transformers {transformers.__version__}" in err[0]
    assert "tdos is tested on torch" in err[0] and "nothing was written" in err[0]
    log = (tmp_path / "run.zarr.log").read_text()
    assert f"log: {tmp_path / 'run.zarr.log'}" in cap.out
    assert "SelfCheckFailed" in log and "Traceback (most recent call last)" in log
    # the stop cancels only futures not yet released (docs/clusters.md): the scheduler, in
    # this process and logging to the same file, never trips its `assert ts.who_wants`
    assert "who_wants" not in log and "AssertionError" not in log
    root = zarr.open_group(str(store), mode="r")
    ledger = root[next(iter(root.group_keys()))]["ledger"][...]
    assert not is_done(ledger).any()                                 # no block written


def test_the_check_sees_a_scaled_derivative_the_routes_agree_without(mamba2):
    """In-process, the same measure the workers take: the unbroken path sits at rounding
    (float64: < 1e-6), a 0.9x derivative of one op far above the bound."""
    from sweep.generic import ssm
    from sweep.worker.model import load_model

    model = load_model(mamba2, dtype="float64")
    ids = selfcheck.probe_ids(model.vocab_size)
    call = selfcheck.whole_sequence_call(model.hf, 0, ids)
    exact = selfcheck.diagonal_error(call, model.token_jacobian(0, ids, len(ids) - 1, "generic"))
    vjp = ssm._vjp
    try:
        ssm._vjp = lambda *a: tuple(None if g is None else 0.9 * g for g in vjp(*a))
        broken = selfcheck.diagonal_error(
            call, model.jacobians(0).run(ids, len(ids) - 1, len(ids)).jac[0])
    finally:
        ssm._vjp = vjp
    assert exact < 1e-6 < selfcheck.bound(torch.float64) < broken
