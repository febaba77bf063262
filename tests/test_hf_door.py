"""The one door to transformers' and datasets' internals (sweep/checkpoints/hf.py).

Every private name the door lists resolves on the installed (locked) releases (one line per
name that is gone), and the door records the releases requirements.lock pins. That no other
module touches one of these names is a layering rule: tests/test_layers.py.
"""
from __future__ import annotations

from pathlib import Path

from sweep.checkpoints import hf

REPO = Path(__file__).resolve().parents[1]


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
