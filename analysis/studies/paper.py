"""The papers' reference values (docs/paper.md) and when they apply.

A reference value is set beside a measured one only where it measures the same thing: the
same checkpoint, the same layer and L, the paper's window [1e-4, 5e-2], the all-stable count
and every token position. For the papers' own checkpoints in another setting the report gives
the values once, in a labelled note; any other model's report does not name them, so that no
toy model's row sits beside a number it cannot be compared with.
"""
from __future__ import annotations

from sweep.format.settings import WINDOW


# Table I of arXiv 2608.18592: Mamba-370M, layer 24, all-stable count; L -> β
PAPER_BETA = {8: -0.228, 16: -0.198, 32: -0.182, 64: -0.170, 128: -0.165, 256: -0.169, 512: -0.168}
PAPER_MODES = {8: 2719, 512: 156593}
# the companion paper, arXiv 2607.10923: Pythia-410M; L -> β (docs/paper.md names no layer)
PAPER_PYTHIA = {8: -0.121, 16: -0.128, 24: -0.10, 28: -0.10}

PAPER_CHECKPOINTS = ("mamba-370m", "mamba-370m-hf", "pythia-410m")
NOTE = ("Paper values (for reference only; this store is not the paper's setting): "
        "Mamba-370M layer 24 β = −0.228 (L = 8, 2,719 modes) … −0.168 (L = 512, 156,593 modes), "
        "near −0.17 for L ≥ 64; Pythia-410M β ≈ −0.121, −0.128, −0.10, −0.10 at L = 8, 16, 24, 28; "
        "window [1e-4, 5e-2], all stable modes counted.")


def _checkpoint(identity: dict) -> str:
    return str(identity.get("path", "")).rstrip("/").split("/")[-1].lower()


def reference(identity: dict, layer: int, settings) -> dict:
    """{L: paper β} where this model, layer and analysis are the paper's; {} otherwise."""
    if tuple(settings.window) != WINDOW or settings.skip_positions:
        return {}
    name = _checkpoint(identity)
    if name in PAPER_CHECKPOINTS[:2] and layer == 24:
        return dict(PAPER_BETA)
    if name == PAPER_CHECKPOINTS[2]:
        return dict(PAPER_PYTHIA)
    return {}


def note(identity: dict, layer: int, settings) -> str | None:
    """The papers' values in words (`NOTE`) for the papers' own checkpoints where they are not
    a column beside the model's own (another layer, window or skipped positions); None for
    every other model, whose report has nothing to read them against."""
    if _checkpoint(identity) not in PAPER_CHECKPOINTS or reference(identity, layer, settings):
        return None
    return NOTE
