"""The declared study in the store: recorded when a sweep starts, shown by `tdos status`.

The root attribute `study` holds the declaration in force (`Study.record`: the declaration,
its id, when it was recorded, whether the store already held finished blocks of a declared
layer then); `study_history` holds every declaration recorded, oldest first. A sweep whose
config declares the recorded study again changes nothing; one that declares another records
it and appends it, so a report can say a declaration came after the data. A config without
`study:` leaves the record as it is. Names and the record's form: sweep/format/study.py.
"""
from __future__ import annotations

import time

import numpy as np
import zarr

from sweep.format.ledger import Ledger, is_done
from sweep.format.study import HISTORY, STUDY, Study


def record_study(root: zarr.Group, study: Study | None) -> str | None:
    """Record `study` in the store `root` unless it is the one in force; the line that says
    what was recorded, or None when nothing was."""
    if study is None:
        return None
    have = root.attrs.get(STUDY)
    if have is not None and have.get("id") == study.id:
        return None
    rec = study.record(declared=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       after_data=holds_data(root, study.layers))
    root.attrs.update({STUDY: rec, HISTORY: [*(root.attrs.get(HISTORY) or []), rec]})
    return f"study {'changed' if have else 'declared'}: {study_line(rec)}"


def holds_data(root: zarr.Group, layers) -> bool:
    """Whether any group of the store holds a finished block of one of `layers`."""
    for name in root.attrs.get("models") or []:
        if name not in root or not root[name].attrs.get("complete"):    # still being made
            continue
        led = Ledger.read(root[name])
        rows = np.isin(led.layers, list(layers))
        if (is_done(led.cells[rows]) & led.planned[rows]).any():
            return True
    return False


def study_line(rec: dict) -> str:
    """One line of a recorded study: its family, when, and whether after the data."""
    against = rec["against"]
    tested = ("; ".join(f"{o} against {', '.join(k)}" for o, k in against.items())
              if isinstance(against, dict)
              else f"{', '.join(rec['observables'])} against {', '.join(against)}")
    when = "after the data" if rec.get("after_data") else "before the data"
    return (f"{tested} at layers {', '.join(map(str, rec['layers']))}, family-wise level "
            f"{rec['level']:g} (Holm); declared {rec['declared']}, {when}")


def status_line(attrs) -> str | None:
    """`tdos status`'s line for the root attributes `attrs`: the study in force and how many
    declarations came before it; None without one."""
    rec = attrs.get(STUDY)
    if rec is None:
        return None
    earlier = len(attrs.get(HISTORY) or []) - 1
    before = f" ({earlier} earlier declaration{'s' * (earlier > 1)} in study_history)" if earlier > 0 else ""
    return f"study: {study_line(rec)}{before}"
