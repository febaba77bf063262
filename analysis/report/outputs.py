"""The files one render writes, each exactly once: a second write of a name is a defect, so
nothing is appended to or rewritten after it is written."""
from __future__ import annotations

from pathlib import Path

from analysis._plot import save


class Outputs:
    """Files written under `out`, in the order written (`written`: names relative to `out`)."""

    def __init__(self, out):
        self.out = Path(out)
        self.written: list[str] = []

    def add(self, name: str, payload) -> str:
        """Write `payload` (text, or a matplotlib Figure saved as PNG) to out/name, once."""
        if name in self.written:
            raise RuntimeError(f"{name} was written already in this render")
        path = self.out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(payload, str):
            path.write_text(payload)
        else:
            save(payload, path)
        self.written.append(name)
        return name
