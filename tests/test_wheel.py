"""The package users install: the wheel holds every module of sweep, analysis and cluster, and
its installed `tdos` command sweeps a generic-path family with the source tree off the path.

No network: the wheel is built without build isolation (setuptools from this venv), and the
temporary environment sees this venv's dependencies through a .pth line. A directory named in
a .pth file is put on sys.path without its own .pth files being run, so the editable install's
finder in this venv stays inactive there: the only `sweep` that environment can import is the
wheel's.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import numpy as np
import torch
import yaml

from families import save_family
from oracle import matched_eigvals_error, oracle_model, sequence_jacobian

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("sweep", "analysis", "cluster")
L = 5


def _build_wheel(tmp: Path) -> Path:
    """`pip wheel` of a copy of the sources (the build writes build/ and *.egg-info next to
    them, and a copy keeps the checkout clean)."""
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    str(src), "-w", str(tmp / "dist")], check=True)
    (wheel,) = (tmp / "dist").glob("tdos-*.whl")
    return wheel


def _environment(tmp: Path, wheel: Path) -> Path:
    """A venv without pip or tdos whose dependencies are this venv's, with the wheel installed."""
    env = tmp / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site) / "dependencies.pth").write_text("\n".join(sorted(ours)) + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, cwd=tmp)
    return env


def test_the_wheel_holds_every_module_and_its_tdos_sweeps_a_generic_family(tmp_path):
    wheel = _build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {p.relative_to(REPO).as_posix() for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")
               if "__pycache__" not in p.parts}
    assert sources and not sources - names, sorted(sources - names)
    assert "sweep/generic/ssm.py" in names

    env = _environment(tmp_path, wheel)
    run_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = subprocess.run([str(env / "bin" / "python"), "-c",
                            "import sweep, sweep.generic.ssm, analysis, cluster; print(sweep.__file__)"],
                           cwd=tmp_path, env=run_env, capture_output=True, text=True, check=True)
    assert Path(where.stdout.strip()).is_relative_to(env), where.stdout

    path = save_family("mamba2", tmp_path / "models", torch.Generator().manual_seed(0))
    store = tmp_path / "wheel.zarr"
    doc = {"models": [{"path": str(path), "name": "mamba2", "dtype": "float64"}],
           "inputs": {"sequences": 1, "length": L, "seed": 3}, "layers": [1], "store": str(store),
           "compute": {"token_block": 5, "live_every": 0, "engine": "generic"},
           "cluster": {"workers": 1}}
    (tmp_path / "wheel.yaml").write_text(yaml.safe_dump(doc))
    out = subprocess.run([str(env / "bin" / "tdos"), "sweep", "wheel.yaml"], cwd=tmp_path, env=run_env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sweep complete" in out.stdout and "J_tt: generic" in out.stdout

    from analysis import open_store

    st = open_store(str(store), model="mamba2")
    assert (st.jacobian_path(1) == "generic").all()
    ids = torch.from_numpy(np.asarray(st.tokens(0)))
    _, J = sequence_jacobian(oracle_model(path), 1, ids)
    want = torch.linalg.eigvals(torch.stack([J[t, :, t] for t in range(L)])).numpy()
    assert matched_eigvals_error(st.eigenvalues(1, 0), want) <= 2e-5
