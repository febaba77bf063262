"""The package layers: block math free of Dask and YAML, analysis free of sweep, one schema."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    """Top-level module names a file imports, at any depth of its code."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            out.add(node.module)
    return out


def _loaded_after(modules: str, watched: tuple) -> list[str]:
    """Which of `watched` a fresh interpreter holds after importing `modules` (comma-separated)."""
    code = f"import {modules}, sys; print(' '.join(m for m in {watched!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    return out.split()


def test_block_math_imports_neither_dask_nor_yaml():
    assert _loaded_after("sweep.blocks.mamba, sweep.blocks.attention, sweep.linalg, sweep.spectra, "
                         "sweep.depth", ("dask", "distributed", "yaml")) == []


def test_analysis_never_imports_sweep_or_cluster():
    for f in sorted((REPO / "analysis").glob("*.py")):
        bad = {m for m in _imports(f) if m.split(".")[0] in ("sweep", "cluster")}
        assert not bad, f"{f.name} imports {sorted(bad)}"


def test_store_layout_is_declared_once():
    """Writer, reader and the tests' synthetic stores take array names from analysis.schema."""
    for f in ("sweep/store.py", "analysis/store.py", "tests/synthetic_store.py"):
        text = (REPO / f).read_text()
        assert "schema" in text, f
        assert '"scale_rayleigh", "scale_residual"' not in text, f"{f} spells out the arrays again"


def test_a_worker_imports_no_plotting_and_no_scipy():
    """Every task imports sweep.task (and through it the store schema): no matplotlib, no
    scipy pulled in with it (the issue's own check, and scipy, which the analysis uses)."""
    assert _loaded_after("sweep.task", ("matplotlib", "scipy")) == []


def test_the_generic_path_imports_no_dask():
    """(transformers itself imports yaml, so only Dask is checked here)"""
    assert _loaded_after("sweep.generic.decode, sweep.generic.selfcheck, sweep.model",
                         ("dask", "distributed")) == []


def test_plan_and_store_import_one_way():
    """config -> plan -> store/tasks: the plan never imports the store, the ledger or the tasks."""
    bad = {m for m in _imports(REPO / "sweep" / "plan.py")
           if m in ("sweep.store", "sweep.ledger", "sweep.tasks", "sweep.task", "sweep.run")}
    assert not bad, sorted(bad)
