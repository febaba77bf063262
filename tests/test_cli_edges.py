"""The rough edges a first user meets on the command line (issue 57, item 8), each against the
real thing: `tdos --version`, a usage line that lists every command's flags, `analyze
--quiet`, `tdos status` on what is not a store, analyze's errors in the house form, a weights
file given as model.path, the tiny config's pointer for cluster kinds, and a background sweep
(SIGINT ignored, as a shell's `&` starts it) stopped cleanly by SIGINT and SIGTERM."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
import zarr
from distributed import LocalCluster
from synthetic_store import synthetic_model, write_store

from analysis.cli import parser as analyze_parser
from cluster.config import KINDS
from sweep.cli import main
from sweep.config.load import ConfigError, load_config
from sweep.format.schema import FORMAT

REPO = Path(__file__).resolve().parents[1]


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert re.fullmatch(rf"tdos \d+\.\d+\S* \(store format {FORMAT}\)\n", capsys.readouterr().out)


def test_the_usage_lists_status_spectra_and_every_analyze_flag(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert "tdos status STORE [--spectra]" in usage and "tdos --version" in usage
    flags = {s for a in analyze_parser()._actions for s in a.option_strings} - {"-h", "--help"}
    assert [f for f in sorted(flags) if f"[{f}" not in usage] == []
    assert max(len(line) for line in usage.splitlines()[1:]) <= 120


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("edges") / "m.zarr"
    write_store(path, [synthetic_model(rows=1, lmax=16, d=16, n_ir=8, seed=6, n_model_layers=2)])
    return path


def test_analyze_quiet_prints_only_the_result_path(store, tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["analyze", str(store), "--out", str(out), "--n-boot", "20", "--quiet"]) == 0
    printed = capsys.readouterr()
    assert printed.out == f"report: {out}/report.md\n" and printed.err == ""
    assert (out / "report.md").is_file()


@pytest.mark.parametrize("argv, message", [
    (["analyze", "{store}", "--wndow", "1", "2"],
     "tdos: error: unrecognized arguments: --wndow 1 2 — see `tdos analyze --help`\n"),
    (["analyze", "{store}", "--level", "2"],
     "tdos: error: analysis.level: must lie strictly between 0 and 1, got 2.0 — e.g. 0.9\n"),
    (["compare", "{store}", "--n-boot", "x"],
     "tdos: error: argument --n-boot: invalid int value: 'x' — see `tdos compare --help`\n")])
def test_analyze_and_compare_errors_are_one_house_line(store, capsys, argv, message):
    assert main([a.format(store=store) for a in argv]) == 2
    printed = capsys.readouterr()
    assert printed.err == message and printed.out == ""


def test_status_says_what_is_there_instead_of_a_store(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("x")
    (tmp_path / "file.zarr").write_text("x")
    zarr.open_group(str(tmp_path / "other.zarr"), mode="w", zarr_format=3).attrs["x"] = 1
    said = {}
    for name in ("missing.zarr", "notes", "file.zarr", "other.zarr"):
        assert main(["status", str(tmp_path / name)]) == 2
        said[name] = capsys.readouterr().err
    fix = " — give the path of a sweep's store\n"
    assert said["missing.zarr"] == f"tdos: error: store: {tmp_path}/missing.zarr not found{fix}"
    assert said["notes"] == (f"tdos: error: store: {tmp_path}/notes is a directory but not a tdos "
                             f"store (it holds no zarr.json){fix}")
    assert said["file.zarr"] == (f"tdos: error: store: {tmp_path}/file.zarr is a file, not a store "
                                 f"(a store is a directory){fix}")
    assert said["other.zarr"] == (f"tdos: error: store: {tmp_path}/other.zarr is a zarr group but not "
                                  f"a tdos store (no tdos_format attribute){fix}")


def _config(tmp_path, path, **more) -> Path:
    doc = {"model": {"path": str(path)}, "inputs": {"sequences": 1, "length": 8},
           "layers": [0], "store": str(tmp_path / "run.zarr"),
           "compute": {"token_block": 1, "live_every": 0}, **more}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(doc))
    return tmp_path / "cfg.yaml"


def test_a_weights_file_as_model_path_names_its_folder(tiny_checkpoints, tmp_path):
    folder = tiny_checkpoints["gpt2"]
    with pytest.raises(ConfigError) as e:
        load_config(_config(tmp_path, folder / "model.safetensors"))
    assert str(e.value) == (f"model.path: {folder}/model.safetensors is a file inside a checkpoint "
                            f"folder — give its folder, {folder}")
    (tmp_path / "loose.bin").write_bytes(b"\0")
    with pytest.raises(ConfigError, match=r"^model\.path: .*loose\.bin is a file, not a checkpoint "
                                          r"— give a checkpoint folder"):
        load_config(_config(tmp_path, tmp_path / "loose.bin"))


def test_the_tiny_config_points_to_the_page_that_lists_cluster_kinds():
    line = next(x for x in (REPO / "configs" / "tiny.yaml").read_text().splitlines()
                if x.strip().startswith("kind:"))
    page = re.search(r"(docs/[\w.-]+\.md)", line).group(1)
    table = (REPO / page).read_text()
    assert [k for k in KINDS if f"| `{k}`" not in table] == []


# ---------------------------------------------------------------- a background sweep, stopped

@pytest.fixture
def idle_scheduler():
    """A real scheduler on a free port with no worker: a sweep attached to it waits in its
    loop until it is stopped, whatever the machine's speed."""
    with LocalCluster(n_workers=0, host="127.0.0.1", scheduler_port=0,
                      dashboard_address="127.0.0.1:0") as cluster:
        yield cluster


def _ignore_sigint():          # what a shell does to a job started with `&`
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_background_sweep_stops_cleanly_on_a_signal(tiny_checkpoints, tmp_path, idle_scheduler,
                                                      sig, code):
    cfg = _config(tmp_path, tiny_checkpoints["gpt2"],
                  compute={"token_block": 1, "live_every": 0, "stall_after": 3600})
    log = tmp_path / "console.txt"
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "sweep", "sweep", str(cfg), "--scheduler",
                                 idle_scheduler.scheduler_address], stdout=fh, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=_ignore_sigint)
        try:
            deadline = time.monotonic() + 300     # a bound on a hang, not a timing assumption
            while not idle_scheduler.scheduler.tasks:     # its tasks submitted: in the loop
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
            proc.send_signal(sig)
            assert proc.wait(timeout=300) == code, log.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
    text = log.read_text()
    assert "sweep interrupted: 0/8 blocks in" in text and "--resume` to finish" in text, text
    assert "Traceback" not in text, text
    root = json.loads((tmp_path / "run.zarr" / "zarr.json").read_text())
    assert root["attributes"]["tdos_format"] == FORMAT          # the store was made, and stays


def test_the_end_of_a_sweep_is_a_few_lines_and_the_legend_waits_for_verbose(tiny_checkpoints,
                                                                            tmp_path, capsys):
    cfg = _config(tmp_path, tiny_checkpoints["gpt2"], layers=[0, 1],
                  compute={"token_block": 4, "live_every": 0}, cluster={"workers": 1})
    store = tmp_path / "run.zarr"
    assert main(["sweep", str(cfg)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert re.fullmatch(rf"sweep complete: 4/4 blocks in {store} \(1 model, layers 0, 1, 1 x 8 "
                        rf"tokens; 4 computed in this run, \d+ s\)", out[-2]), out
    assert out[-1] == (f"next: tdos analyze {store}   (report.md, figures, fits.json; "
                       f"`tdos status {store} --spectra`: β per layer now)")
    assert len(out) <= 8 and not any("tokens: token positions done" in x for x in out), out
    assert main(["sweep", str(cfg), "--verbose"]) == 0            # nothing left: the summary
    verbose = capsys.readouterr().out
    assert "tokens: token positions done" in verbose and "λ min" in verbose
