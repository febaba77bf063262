"""Property-based: whatever a user puts in a config or does to a checkpoint directory, `tdos
sweep` ends with exit 2 and one `tdos: error:` line before any compute, never a traceback,
and leaves no store behind; once the input is fixed the same command just works.

Each example calls the CLI's `main` in-process with --dry-run (everything is validated,
nothing runs), so the fast subset stays a few seconds per property (small max_examples,
deadline=None: the first checkpoint inspection imports transformers).
"""
from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sweep.cli import main

FAST = settings(max_examples=8, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
_count = itertools.count()


def _base(ckpt: Path, store: Path) -> dict:
    return {"model": {"path": str(ckpt), "dtype": "float32"},
            "inputs": {"sequences": 1, "length": 8, "seed": 0},
            "layers": [0], "store": str(store),
            "compute": {"token_block": 8, "live_every": 0},
            "cluster": {"kind": "local", "workers": 1, "slurm": {}}, "analysis": {}}


def _run(doc: dict, work: Path, *extra: str) -> tuple[int, str, str]:
    path = work / f"cfg{next(_count)}.yaml"
    path.write_text(yaml.safe_dump(doc))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["sweep", str(path), *extra])
    return code, out.getvalue(), err.getvalue()


def _assert_one_line_error(code: int, err: str) -> None:
    assert code == 2, err
    assert err.startswith("tdos: error: ") and err.endswith("\n") and err.count("\n") == 1, err


# values a user might type: wrong types, wrong ranges, odd unicode (control characters,
# lone surrogates, right-to-left marks), empty things
ODD_TEXT = st.text(st.one_of(st.characters(), st.characters(categories=("Cs", "Cc", "Cf"))), max_size=12)
VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.integers(-3, 3),
    st.floats(allow_nan=True, allow_infinity=True), ODD_TEXT,
    st.sampled_from(["", ".", "/", "all", "float16", "-1", "nan", "~", "a/b", "../..", "x" * 300]),
    st.lists(st.one_of(st.integers(-3, 5), ODD_TEXT), max_size=3),
    st.dictionaries(st.one_of(st.integers(-2, 5), ODD_TEXT), st.integers(-2, 9), max_size=2),
)
FIELDS = ["model", "model.path", "model.dtype", "model.revision", "model.name", "model.layers",
          "inputs", "inputs.sequences", "inputs.length", "inputs.seed", "inputs.text",
          "inputs.tokenizer", "inputs.dataset", "inputs.dataset_config", "inputs.split",
          "inputs.column", "inputs.min_chars", "inputs.windows", "inputs.offset", "inputs.bos", "layers", "store", "compute", "compute.token_block",
          "compute.device", "compute.live_every", "compute.stall_after", "compute.cpu_linalg", "cluster.kind",
          "cluster.workers", "cluster.memory_limit", "cluster.slurm.memory",
          "cluster.slurm.job_extra_directives", "analysis.lengths", "analysis.layer", "analysis.window",
          "analysis.level", "analysis.n_boot", "analysis.modes", "analysis.skip_positions",
          "analysis.seed", "analysis.primary", "unknown_top_level",
          "inputs.unknown"]


def _set(doc: dict, dotted: str, value) -> None:
    *parents, last = dotted.split(".")
    node = doc
    for p in parents:
        node = node[p]
    node[last] = value


@pytest.mark.parametrize("field", FIELDS)
@FAST
@given(value=VALUES)
def test_any_field_value_is_refused_in_one_line_or_accepted(tiny_checkpoints, tmp_path, field, value):
    work = tmp_path / f"w{next(_count)}"
    work.mkdir()
    store = work / "run.zarr"
    doc = _base(tiny_checkpoints["gpt2"], store)
    _set(doc, field, value)
    code, out, err = _run(doc, work, "--dry-run")
    if code != 0:
        _assert_one_line_error(code, err)
    else:
        assert out.splitlines()[-1].startswith("budget: ") and err == ""
    assert not store.exists()                       # --dry-run, or refused: nothing written


# ---------------------------------------------------------------- broken checkpoint directories

SHAPE_FIELDS = {  # config.json fields every value of which (but the saved one) changes a weight's shape
    "gpt2": ["n_embd", "vocab_size", "n_layer", "n_positions", "n_inner"],
    "gpt_neox": ["hidden_size", "vocab_size", "num_hidden_layers", "intermediate_size"],
    "llama": ["hidden_size", "vocab_size", "num_hidden_layers", "intermediate_size"],
    "mamba": ["hidden_size", "vocab_size", "num_hidden_layers", "state_size", "intermediate_size"],
    "mamba_ssm": ["d_model", "n_layer"],
}
DAMAGE = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0.0, 0.999)),
    st.tuples(st.just("remove"), st.sampled_from(["config.json", "weights"])),
    st.tuples(st.just("edit"), st.integers(0, 4), st.integers(1, 300)),
)


def _damage(d: Path, arch: str, damage) -> bool:
    """Apply `damage` to checkpoint dir `d`; False when it left the checkpoint as it was."""
    weights = next(f for f in d.iterdir() if f.suffix in (".safetensors", ".bin"))
    if damage[0] == "truncate":
        data = weights.read_bytes()
        weights.write_bytes(data[: int(len(data) * damage[1])])
    elif damage[0] == "remove":
        (d / "config.json" if damage[1] == "config.json" else weights).unlink()
    else:
        fields = SHAPE_FIELDS[arch]
        name = fields[damage[1] % len(fields)]
        cfg = json.loads((d / "config.json").read_text())
        if cfg.get(name) == damage[2] or (name == "n_inner" and damage[2] == 4 * cfg["n_embd"]):
            return False
        cfg[name] = damage[2]
        (d / "config.json").write_text(json.dumps(cfg))
    return True


@pytest.mark.parametrize("arch", sorted(SHAPE_FIELDS))
@FAST
@given(damage=DAMAGE)
def test_broken_checkpoint_is_one_line_and_fixing_it_just_works(tiny_checkpoints, tmp_path, arch, damage):
    work = tmp_path / f"w{next(_count)}"
    ckpt = shutil.copytree(tiny_checkpoints[arch], work / "ckpt")
    store = work / "run.zarr"
    doc = _base(ckpt, store)
    if not _damage(ckpt, arch, damage):
        return
    code, _, err = _run(doc, work, "--dry-run")
    _assert_one_line_error(code, err)
    assert not store.exists()
    shutil.rmtree(ckpt)                              # the fix: a fresh download
    shutil.copytree(tiny_checkpoints[arch], ckpt)
    code, out, err = _run(doc, work, "--dry-run")
    assert code == 0 and err == "" and out.splitlines()[-1].startswith("budget: 1 blocks")


# ---------------------------------------------------------------- the real command

def test_failed_run_then_fix_then_same_command_completes(tiny_checkpoints, tmp_path):
    """A truncated download fails the sweep before a store exists; after re-downloading,
    the very same command runs to completion."""
    ckpt = shutil.copytree(tiny_checkpoints["mamba"], tmp_path / "ckpt")
    weights = ckpt / "model.safetensors"
    whole = weights.read_bytes()
    weights.write_bytes(whole[: len(whole) // 2])
    doc = _base(ckpt, tmp_path / "run.zarr")
    code, _, err = _run(doc, tmp_path)
    _assert_one_line_error(code, err)
    assert "model.safetensors is truncated or corrupt" in err and not (tmp_path / "run.zarr").exists()
    weights.write_bytes(whole)
    code, out, err = _run(doc, tmp_path)
    assert code == 0, err
    assert out.startswith("budget: 1 blocks over 1 layer rows")       # the one-line budget first
    assert "sweep complete: 1/1 blocks" in out


def test_sweep_that_cannot_fit_in_memory_is_refused_with_the_numbers(tiny_checkpoints, tmp_path):
    from sweep.process import process_term

    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    workers = ram // process_term().bytes + 1     # each worker needs at least the bare process
    code, _, err = _run(_base(tiny_checkpoints["gpt2"], tmp_path / "run.zarr"), tmp_path,
                        "--workers", str(workers))
    _assert_one_line_error(code, err)
    assert err.startswith(f"tdos: error: compute: {workers} worker(s) x ")
    assert "exceeds this machine's" in err and not (tmp_path / "run.zarr").exists()


def test_a_memory_limit_below_one_worker_is_refused_also_by_the_dry_run(tiny_checkpoints, tmp_path):
    """--dry-run prints the budget, with what a worker holds, then the same one-line refusal the
    run would give; a limit that fits passes."""
    doc = _base(tiny_checkpoints["gpt2"], tmp_path / "run.zarr")
    doc["model"]["dtype"] = "float64"
    doc["cluster"] = {"memory_limit": "100MB"}
    code, out, err = _run(doc, tmp_path, "--dry-run")
    _assert_one_line_error(code, err)
    assert err.startswith("tdos: error: cluster.memory_limit: 0.0931 GiB per worker (memory_limit "
                          "100MB) is below what one worker needs: Dask stops a worker at 80% of its "
                          "limit (distributed.worker.memory.pause = 0.8)")
    assert "raise memory_limit" in err and "1 layer(s) x " in out and "layer-local" in out
    doc["cluster"] = {"memory_limit": "4GB"}
    code, out, err = _run(doc, tmp_path, "--dry-run")
    assert code == 0 and not err and "per worker 3.73 GiB (cluster.memory_limit)" in out
    assert "  process: " in out and "MiB, measured" in out and "it stops a worker at 80% of it" in out
    assert not (tmp_path / "run.zarr").exists()


def test_a_cluster_error_at_connect_is_one_line(tiny_checkpoints, tmp_path):
    """The cluster raises its own ConfigError (it imports nothing of sweep); a bad --scheduler
    address, found only when the sweep connects, still ends as one `tdos: error:` line."""
    doc = _base(tiny_checkpoints["gpt2"], tmp_path / "run.zarr")
    code, _, err = _run(doc, tmp_path, "--scheduler", "ftp://127.0.0.1:1")
    _assert_one_line_error(code, err)
    assert err.startswith("tdos: error: --scheduler: unknown protocol 'ftp' in 'ftp://127.0.0.1:1'")


def test_store_paths_that_cannot_hold_a_store(tiny_checkpoints, tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "zarr.json").write_text('{"zarr_format": 3')
    cases = {"file": "exists and is a file", "file/run.zarr": "is not writable",
             "foreign": "exists and is not a tdos store", "damaged": "is not a zarr v3 group's metadata"}
    for path, what in cases.items():
        code, _, err = _run(_base(tiny_checkpoints["gpt2"], tmp_path / path), tmp_path)
        _assert_one_line_error(code, err)
        assert what in err
    assert sorted(os.listdir(tmp_path / "foreign")) == ["notes.txt"]


YAML_NOISE = st.one_of(
    st.binary(max_size=120),
    st.text(max_size=120).map(str.encode),
    st.lists(st.sampled_from(["model:", "  path: x", "inputs:", "- 1", "[", "]", "{", "}", ": ", "&a",
                              "*a", "!!python/name:os.system", "\t", "---", "...", "? ", "%YAML 1.1",
                              "layers: all", "store: ''", "\x00", "\ufeff", "'", '"']),
             max_size=12).map(lambda parts: "\n".join(parts).encode("utf-8", "surrogatepass")),
)


@FAST
@given(data=YAML_NOISE)
def test_any_config_file_content_is_refused_in_one_line(tmp_path, data):
    path = tmp_path / f"noise{next(_count)}.yaml"
    path.write_bytes(data)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["sweep", str(path), "--dry-run"])
    _assert_one_line_error(code, err.getvalue())


def test_deeply_nested_yaml_is_refused_in_one_line(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("inputs: " + "[" * 100_000 + "]" * 100_000 + "\n")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["sweep", str(path), "--dry-run"])
    _assert_one_line_error(code, err.getvalue())


BYTES_MAMBA = Path(__file__).resolve().parents[1] / "checkpoints" / "tiny-mamba-bytes"


@FAST
@given(data=st.one_of(st.binary(max_size=64), st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_any_text_file_is_read_or_refused_in_one_line(tmp_path, data):
    """inputs.text of arbitrary bytes, read by the shipped byte-level tokenizer: a plan when
    it is UTF-8 text of at least sequences*length = 8 bytes, else one line."""
    work = tmp_path / f"w{next(_count)}"
    work.mkdir()
    (work / "t.txt").write_bytes(data)
    doc = _base(BYTES_MAMBA, work / "run.zarr")
    doc["inputs"]["text"] = "t.txt"
    code, out, err = _run(doc, work, "--dry-run")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    ok = text is not None and "\x00" not in text and text.strip() != "" and len(data) >= 8
    if ok:
        assert code == 0 and out.splitlines()[-1].startswith("budget: 1 blocks"), err
    else:
        _assert_one_line_error(code, err)


@pytest.mark.parametrize("command", ["status", "upgrade"])
def test_status_and_upgrade_of_a_damaged_or_missing_store_are_one_line(tmp_path, capsys, command):
    from sweep.cli import main

    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "zarr.json").write_text('{"zarr_format": 3')
    for path, what in {"damaged": "is not a zarr v3 group's metadata", "absent": "not found"}.items():
        code = main([command, str(tmp_path / path)])
        err = capsys.readouterr().err
        _assert_one_line_error(code, err)
        assert what in err
    assert (tmp_path / "damaged" / "zarr.json").read_text() == '{"zarr_format": 3'
