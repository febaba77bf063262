"""ARCHITECTURE.md is read from the tree: every module path it names exists, and every
subpackage of sweep/, analysis/ and cluster/ is named in it (a new room shows up as a failure
here until the map says where it sits)."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("sweep", "analysis", "cluster")


def named_paths(text: str) -> set[str]:
    """Every backticked file or folder path (`sweep/run.py`, `analysis/io/`) and dotted
    module (`sweep.format.schema`) of the document, dotted names as paths."""
    out = set()
    for token in re.findall(r"`([^`\s]+)`", text):
        token = token.rstrip(",.;:")
        if token.split("/")[0] in PACKAGES or token.split("/")[0] in ("tests", "benchmarks",
                                                                      "configs", "docs"):
            out.add(token)
        elif (re.fullmatch(r"(sweep|analysis|cluster)(\.[a-z_0-9]+)+", token)
              and not token.endswith(".py")):
            out.add(token.replace(".", "/"))
    return out


def missing(root: Path, text: str) -> list[str]:
    """The named paths that exist neither as a file, a folder, nor a module (`x/y` as x/y.py)."""
    gone = []
    for p in sorted(named_paths(text)):
        base = p.rstrip("/")
        if not any((root / c).exists() for c in (base, base + ".py")):
            gone.append(p)
    return gone


def bare_modules(text: str) -> list[str]:
    """Backticked `name.py` without its folder: the reader cannot find it."""
    return sorted({t for t in re.findall(r"`([A-Za-z_0-9]+\.py)`", text)})


def subpackages(root: Path) -> list[str]:
    return sorted(str(p.parent.relative_to(root)) for top in PACKAGES
                  for p in (root / top).rglob("__init__.py"))


def test_every_path_architecture_names_exists():
    text = (REPO / "ARCHITECTURE.md").read_text()
    assert named_paths(text), "ARCHITECTURE.md names no module"
    assert missing(REPO, text) == []
    assert bare_modules(text) == [], "give these modules their folder"


def test_every_subpackage_is_on_the_map():
    text = (REPO / "ARCHITECTURE.md").read_text()
    assert [p for p in subpackages(REPO) if f"`{p}/`" not in text and f"`{p}/" not in text] == []


def test_the_check_catches_a_stale_path():
    """A test of the test: a moved module and a bare file name are reported."""
    text = ("the reader `analysis/io/reader_that_moved.py`, `sweep.nowhere.module`, `rates.py`, "
            "`cluster.py`")
    assert missing(REPO, text) == ["analysis/io/reader_that_moved.py", "sweep/nowhere/module"]
    assert bare_modules(text) == ["cluster.py", "rates.py"]
