"""Issue 55 item 2: one room reads checkpoints (sweep/checkpoints/). Outside it no module imports
a format's reader (so none asks which format a checkpoint is: it calls `open_checkpoint` and the
`Checkpoint` interface), and only the GGUF reader's bytes module imports `gguf`'s dequantizer;
a test of the test plants both."""
from __future__ import annotations

import ast
from pathlib import Path

from test_layers import PACKAGES, copy_packages

REPO = Path(__file__).resolve().parents[1]
ROOM = "sweep.checkpoints"
READERS = ("directory", "mamba_ssm", "gguf_file", "gguf_tensors")     # the formats' modules
DEQUANTIZES = "sweep.checkpoints.gguf_tensors"


def _module(root: Path, p: Path) -> str:
    parts = list(p.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room_violations(root: Path = REPO) -> list[str]:
    """'module: what' for every reader imported outside the room, every import of gguf's
    dequantizer outside the GGUF reader's bytes module."""
    readers = {f"{ROOM}.{r}" for r in READERS}
    bad = []
    for top in PACKAGES:
        for p in sorted((root / top).rglob("*.py")):
            name = _module(root, p)
            for node in ast.walk(ast.parse(p.read_text())):
                if isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    got = {base, *(f"{base}.{a.name}" for a in node.names)}
                elif isinstance(node, ast.Import):
                    got = {a.name for a in node.names}
                else:
                    continue
                if not name.startswith(ROOM) and got & readers:
                    bad.append(f"{name}: imports {sorted(got & readers)[0]}")
                if name != DEQUANTIZES and any(g.startswith("gguf") and g.endswith(".dequantize") for g in got):
                    bad.append(f"{name}: imports gguf's dequantize")
    return bad


def test_only_the_room_reads_a_format_and_only_the_gguf_reader_dequantizes():
    assert room_violations() == []


def test_the_check_finds_a_planted_reader_import_and_a_dequantize(tmp_path):
    copy_packages(tmp_path)
    planted = tmp_path / "sweep" / "plan" / "planted.py"
    planted.write_text("from sweep.checkpoints.gguf_file import claims\n"
                       "from sweep.checkpoints import mamba_ssm\n"
                       "from gguf import dequantize\n")
    inside = tmp_path / "sweep" / "checkpoints" / "gguf_file.py"
    inside.write_text(inside.read_text() + "\nfrom gguf.quants import dequantize\n")
    assert sorted(room_violations(tmp_path)) == [
        "sweep.checkpoints.gguf_file: imports gguf's dequantize",
        "sweep.plan.planted: imports gguf's dequantize",
        "sweep.plan.planted: imports sweep.checkpoints.gguf_file",
        "sweep.plan.planted: imports sweep.checkpoints.mamba_ssm"]
