"""Issue 57 item 6: docs/api.md lists every public name of `analysis` (what `from analysis
import NAME` gives), and no name that is not one."""
from __future__ import annotations

import re
from pathlib import Path

import analysis

API = Path(__file__).resolve().parents[1] / "docs" / "api.md"
HEADING = "### Every public name of `analysis`"


def listed(text: str) -> set[str]:
    """The backticked names of the section's table (its first column)."""
    section = text.split(HEADING, 1)[1].split("\n#", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {n for cell in rows for n in re.findall(r"`([A-Za-z_][A-Za-z_0-9]*)`", cell)}


def test_every_public_name_is_in_the_api_page():
    names = listed(API.read_text())
    assert sorted(set(analysis.__all__) - names) == []
    assert sorted(names - set(analysis.__all__) - {"measure"}) == []   # measure: its room's
    assert "ensemble_study" in names and "ensemble_across_depth" in names


def test_the_check_catches_a_name_left_out():
    """A test of the test: a page without one row misses exactly its names."""
    text = API.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `ensemble_study`"))
    assert listed(text.replace(row + "\n", "")) == listed(text) - {"ensemble_study", "EnsembleStudy"}
