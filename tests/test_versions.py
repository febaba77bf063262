"""The transformers versions tdos names are the ones its files pin, and a too-old one is
refused in one line before anything runs."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from sweep.worker import versions

REPO = Path(__file__).resolve().parents[1]


def _pinned(name: str) -> str:
    line = next(l for l in (REPO / "requirements.lock").read_text().splitlines()
                if l.lower().startswith(f"{name}=="))
    return line.split("==")[1]


def test_the_lock_pins_a_tested_transformers_and_pyproject_the_minimum():
    assert _pinned("transformers") in versions.TESTED_TRANSFORMERS
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'"transformers>=([\d.]+)"', pyproject).group(1) == versions.MIN_TRANSFORMERS
    assert versions.MIN_TRANSFORMERS == versions.TESTED_TRANSFORMERS[0]   # the minimum is tested


def test_the_lock_pins_the_cpu_torch_the_makefile_installs():
    assert _pinned("torch").split("+")[0] == "2.13.0"


@pytest.mark.parametrize("version, ok", [("5.14.0", False), ("4.57.6", False), ("5.24.0", True),
                                         ("5.25.0", True), ("5.26.0.dev0", True), ("6.0.0", True)])
def test_too_old_transformers_gets_one_line_naming_the_minimum(version, ok):
    problem = versions.transformers_problem(version)
    assert (problem is None) == ok
    if not ok:
        assert "\n" not in problem and f"transformers {version} is older than 5.24.0" in problem
        assert "pip install 'transformers>=5.24.0'" in problem


def test_the_versions_note_names_both_and_which_is_untested():
    from importlib.metadata import version

    torch = version("torch")
    assert versions.versions_note({"torch": torch, "transformers": "5.25.0"}).startswith(
        f"torch {torch} and transformers 5.25.0 (tdos is tested on torch 2.13.0, transformers ")
    assert versions.versions_note({"torch": "2.13.0+cpu", "transformers": "5.25.0"}).endswith("; both tested)")
    assert versions.versions_note({"torch": "2.15.0", "transformers": "5.25.0"}).endswith("; torch lies outside)")
    assert versions.versions_note({"torch": "2.15.0", "transformers": "5.26.0"}).endswith(
        "; torch and transformers lie outside)")
    assert f"torch {torch} and transformers 5.3.0" in versions.transformers_problem("5.3.0")


def test_provenance_never_asks_cudnn_off_cuda(monkeypatch):
    """A CUDA build of torch on a machine without a GPU may still find a cuDNN library (so
    `cudnn.is_available()`) that does not match it, and `cudnn.version()` raises (issue 45):
    monkeypatched so here. A CPU-only run records no cuDNN and never asks; on CUDA the
    failure is recorded, not raised."""
    import torch

    from sweep.plan import provenance

    def mismatched():
        raise RuntimeError("cuDNN version incompatibility")
    monkeypatch.setattr(torch.backends.cudnn, "version", mismatched)
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    if torch.cuda.is_available():
        assert provenance.software()["cudnn"].startswith("unreadable (RuntimeError")
    else:
        assert provenance.software()["cudnn"] is None


def test_tdos_sweep_refuses_a_too_old_transformers_before_reading_the_config(tmp_path):
    """The real CLI in a process whose transformers reports an old version (its metadata is
    what pip installed; the process is told otherwise through importlib.metadata)."""
    code = ("import importlib.metadata as m, sys; real = m.version; "
            "m.version = lambda name: '5.3.0' if name == 'transformers' else real(name); "
            "from sweep.cli import main; sys.exit(main(['sweep', 'missing.yaml']))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    lines = [l for l in out.stderr.splitlines() if l.strip()]
    assert out.returncode == 2
    assert lines == [f"tdos: error: {versions.transformers_problem('5.3.0')}"]
