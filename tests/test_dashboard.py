"""The /tdos page of the Dask dashboard, fetched over HTTP from real schedulers.

(The page on a plain `dask scheduler` after a sweep: tests/test_dask_cli.py.)
"""
from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psutil
from distributed import Client, LocalCluster

from analysis import open_store
from cluster.dashboard import TdosPage, page_link
from sweep.config.load import config_from_dict
from sweep.run import run_sweep
from sweep_helpers import sweep_doc

REPO = str(Path(__file__).resolve().parents[1])


def _get(url: str) -> str:
    return urllib.request.urlopen(url, timeout=30).read().decode()


def _listening() -> set:
    """TCP ports this process listens on (the LocalCluster's scheduler lives here)."""
    return {c.laddr for c in psutil.Process().net_connections("tcp") if c.status == psutil.CONN_LISTEN}


def test_page_adds_no_listener_and_refreshes_while_running():
    with LocalCluster(n_workers=0, host="127.0.0.1", scheduler_port=0,
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        before = _listening()
        pushes = itertools.count()
        snapshot = lambda running: {"store": "/data/run.zarr", "running": running,   # noqa: E731
                                    "verdict": f"push {next(pushes)}", "models": []}
        with TdosPage(client, snapshot, every=0.1) as page:
            assert page.link == page_link(client) == client.dashboard_link.replace("/status", "/tdos")
            assert page.note == f"  (tdos page: {page.link})"
            first = _get(page.link)
            assert "/data/run.zarr" in first and 'http-equiv="refresh"' in first
            end = time.monotonic() + 20
            while "push 0" in _get(page.link):                 # pushed again while running
                assert time.monotonic() < end, "the page was not updated while running"
                time.sleep(0.2)
        last = _get(page.link)
        assert _listening() == before                          # served by the dashboard's socket
        assert 'http-equiv="refresh"' not in last and "ended" in last
        (sweep,) = json.loads(_get(page.link + ".json"))["sweeps"]
        assert sweep["running"] is False and sweep["store"] == "/data/run.zarr"


def test_sweep_page_shows_counts_betas_and_tdos(tiny_checkpoints, tmp_path):
    """A sweep on a LocalCluster with the live plot on: while it runs the page reloads
    itself; at the end it holds every layer's counts and β with CI for both mode counts."""
    doc = sweep_doc(tiny_checkpoints, tmp_path / "run.zarr")
    doc["compute"].update(live_every=5, token_block=4)           # 3 layers x 4 seqs x 4 blocks
    cfg = config_from_dict(doc)
    with LocalCluster(n_workers=1, threads_per_worker=1, host="127.0.0.1", scheduler_port=0,
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        link = page_link(client)
        out = {}
        sweep = threading.Thread(target=lambda: out.update(
            result=run_sweep(cfg, client=client, progress=False)))
        sweep.start()
        seen_running = False
        while sweep.is_alive():
            try:
                seen_running |= 'http-equiv="refresh"' in _get(link)
            except urllib.error.HTTPError:                  # 404 until the sweep registers
                pass
            time.sleep(0.3)
        sweep.join()
        assert out["result"].exit_code == 0
        page = _get(link)
        (snap,) = json.loads(_get(link + ".json"))["sweeps"]
    assert seen_running
    assert str(tmp_path / "run.zarr") in page and "complete: 48/48 blocks" in page
    assert "data:image/png;base64," in page                # the live TDOS picture
    st = open_store(cfg.store)
    assert snap["primary"] == "mle:symmetry-removed"                 # the store's primary, one β
    assert "quick preview" in snap["method"] and "the report: 500" in snap["method"]
    (model,) = snap["models"]
    for row in model["layers"]:
        assert (row["done"], row["flagged"], row["total"]) == (16, 0, 16)
        b, h = row["beta"], st.beta(row["layer"])          # the report's number for (layer, L)
        assert b["beta"] == h.beta and b["L"] == h.L and b["unit"] == h.unit, (row["layer"], b)
        # 4 sequences: a jackknife, 4 leave-one-out fits whatever n_boot says (issue 57)
        assert b["lo"] < b["hi"] and "4 leave-one-out fits (quick preview; the report: 500)" in b["method"]
    # the page prints the same β and CI as the JSON carries, under the primary's name
    b0 = model["layers"][0]["beta"]
    assert re.search(re.escape(f"{b0['beta']:+.3f} [{b0['lo']:+.3f}, {b0['hi']:+.3f}]"), page)
    assert "β mle:symmetry-removed [CI], quick preview" in page


# A `dask scheduler` whose Python cannot import tdos: the editable install's finder and the
# repository are taken off the import path before the scheduler starts.
_SCHEDULER_WITHOUT_TDOS = """
import importlib.util, sys
sys.meta_path = [f for f in sys.meta_path if 'editable' not in repr(f)]
sys.path = [p for p in sys.path if p not in ('', '.', REPO)]
assert importlib.util.find_spec('cluster') is None, 'tdos still importable'
sys.argv = ['dask-scheduler', '--host', '127.0.0.1', '--port', '0',
            '--dashboard-address', '127.0.0.1:0', '--scheduler-file', FILE]
from distributed.cli.dask_scheduler import main
main()
"""


def test_page_on_a_scheduler_that_cannot_import_tdos(tmp_path):
    sf = tmp_path / "scheduler.json"
    code = _SCHEDULER_WITHOUT_TDOS.replace("REPO", repr(str(REPO))).replace("FILE", repr(str(sf)))
    log = open(tmp_path / "scheduler.log", "w")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        end = time.monotonic() + 60
        while not sf.is_file():
            assert proc.poll() is None and time.monotonic() < end, (tmp_path / "scheduler.log").read_text()
            time.sleep(0.1)
        with Client(scheduler_file=str(sf)) as client:
            # a lambda travels by value (a function of this module would need the module there)
            finds = lambda: __import__("importlib.util").util.find_spec("cluster") is not None  # noqa: E731
            assert client.run_on_scheduler(finds) is False
            snapshot = lambda running: {"store": "/data/run.zarr", "running": running}  # noqa: E731
            with TdosPage(client, snapshot, every=1) as page:
                assert page.link, page.note
            assert "/data/run.zarr" in _get(page.link)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
