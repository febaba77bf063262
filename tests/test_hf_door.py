"""The one door to transformers' and datasets' internals (sweep/plan/hf.py).

Every private name the door lists resolves on the installed (locked) releases, and no other
module of sweep/, analysis/ or cluster/ imports a private transformers/datasets name or reads
one of the door's names.
"""
from __future__ import annotations

import ast
import shutil
from pathlib import Path

from sweep.plan import hf

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("sweep", "analysis", "cluster")
DOOR = Path("sweep/plan/hf.py")
LIBRARIES = ("transformers", "datasets")
ACCESSORS = ("getattr", "hasattr", "setattr", "delattr")


def _private_path(dotted: str) -> bool:
    """A transformers/datasets module path with a leading-underscore segment."""
    parts = dotted.split(".")
    return parts[0] in LIBRARIES and any(p.startswith("_") for p in parts[1:])


def _imports(node) -> list[str]:
    """What an import statement brings in, as dotted names (module, or module.name)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        return [f"{node.module}.{a.name}" for a in node.names]
    return []


def door_violations(root: Path = REPO) -> list[str]:
    """Every touch of a private name outside the door, as 'path:line: what'."""
    listed = {p.name for p in hf.PRIVATE}
    bad = []
    for top in PACKAGES:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root)
            if rel == DOOR:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(rel))):
                for name in _imports(node):
                    if _private_path(name) or name in listed:
                        bad.append(f"{rel}:{node.lineno}: imports {name}")
                if isinstance(node, ast.Attribute) and node.attr in hf.PRIVATE_ATTRIBUTES:
                    bad.append(f"{rel}:{node.lineno}: reads .{node.attr}")
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id in ACCESSORS and len(node.args) > 1
                        and isinstance(node.args[1], ast.Constant)
                        and node.args[1].value in hf.PRIVATE_ATTRIBUTES):
                    bad.append(f"{rel}:{node.lineno}: {node.func.id}(…, {node.args[1].value!r})")
    return bad


def test_every_listed_name_resolves():
    gone = []
    for entry in hf.PRIVATE:
        try:
            hf.resolve(entry)
        except (ImportError, AttributeError) as e:
            gone.append(f"{entry.name} is gone ({type(e).__name__}: {e}) — it {entry.does}")
    assert not gone, "\n".join(gone)


def test_door_records_the_locked_releases():
    """hf.TESTED names the releases requirements.lock pins."""
    pins = dict(line.split("==", 1) for line in (REPO / "requirements.lock").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    for lib, version in hf.TESTED.items():
        assert pins[lib].split("+")[0] == version, (lib, pins[lib], version)


def test_no_private_name_outside_the_door():
    bad = door_violations()
    assert not bad, "\n".join(bad)


def test_the_check_finds_a_planted_import_and_attribute(tmp_path):
    for top in PACKAGES:
        shutil.copytree(REPO / top, tmp_path / top, ignore=shutil.ignore_patterns("__pycache__"))
    planted = tmp_path / "sweep" / "worker" / "planted.py"
    planted.write_text("from transformers.utils import _is_package_available\n"
                       "import datasets._private\n"
                       "from transformers.core_model_loading import rename_source_key\n\n\n"
                       "def f(model, ds):\n"
                       "    model._init_weights(model)\n"
                       "    return getattr(ds, '_fingerprint')\n")
    bad = sorted(door_violations(tmp_path))
    assert bad == ["sweep/worker/planted.py:1: imports transformers.utils._is_package_available",
                   "sweep/worker/planted.py:2: imports datasets._private",
                   "sweep/worker/planted.py:3: imports transformers.core_model_loading.rename_source_key",
                   "sweep/worker/planted.py:7: reads ._init_weights",
                   "sweep/worker/planted.py:8: getattr(…, '_fingerprint')"], bad
