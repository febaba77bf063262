"""Numbers as every report prints them: one value, an interval, a p to the resolution its
method has. numpy only, so the renderers (analysis/report/) print without importing any fit.
"""
from __future__ import annotations

import numpy as np

NORMAL = "normal"            # the p_method of a normal-theory interval
P_TAIL = 1e-4                # below this a parametric p prints as "< 1e-4" (`format_p`)
DASH = "–"                   # what a number that was not measured prints as


def short_of(check: dict) -> str:
    """'not enough data (n = 86 stable modes in the window, needs 500)' from a check's dict
    (analysis/fit/enough.py `Enough.to_dict`); '' when it had enough."""
    if check.get("enough", check["n"] >= check["needs"]):
        return ""
    return f"not enough data (n = {check['n']:,} {check['counts']}, needs {check['needs']:,})"


def num(v, fmt="+.3f") -> str:
    """`v` in `fmt`, or "–" when it is not a finite number (nothing measured)."""
    return format(v, fmt) if v is not None and np.isfinite(v) else DASH


def ci(lo, hi, fmt="+.3f") -> str:
    """"[lo, hi]" in `fmt`, or "–" when either end is missing."""
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return DASH
    return f"[{lo:{fmt}}, {hi:{fmt}}]"


def p_floor(p_method) -> float:
    """The smallest p a method can give: 2/(1+B) for a bootstrap of B replicates, 0 otherwise."""
    if p_method.startswith("bootstrap B="):
        return 2 / (1 + int(p_method.split("=")[1].split()[0]))
    return 0.0


def format_p(p, p_method=NORMAL) -> str:
    """p printed to the resolution its method has: a bootstrap p at its floor prints
    "≤ 2/(1+B)"; a t or normal p below 1e-4 prints "< 1e-4", since nothing in a handful of
    sequences pins the distribution's far tail (analysis/fit/multiplicity.py)."""
    if p is None or not np.isfinite(p):
        return DASH
    floor = p_floor(p_method)
    if floor and p <= floor * (1 + 1e-9):
        return f"≤ {floor:.2g}"
    if not floor and p < P_TAIL:
        return f"< {P_TAIL:g}"
    return f"{p:.2g}"


def t_method(dof=None) -> str:
    """The p_method of an interval from Student's t with `dof` (None/inf: the normal)."""
    d = np.inf if dof is None or not np.isfinite(dof) else float(dof)
    return NORMAL if d == np.inf else f"t({d:.3g})"


def estimator_words(primary) -> str:
    """"in-window MLE, symmetry-removed modes": a primary β's estimator and mode count."""
    what = "cumulative fit" if primary.estimator == "cumulative" else "in-window MLE"
    return f"{what}, {primary.modes} modes"


def interval_words(level, unit) -> str:
    """"90% CI, jackknife over 4 sequences, t(3)" or "90% CI, bootstrap over circular blocks of
    28 tokens": the level and what was really resampled (`unit`, BootstrapIR.unit)."""
    unit = str(unit or "tokens")
    how = unit if unit.startswith("jackknife") else f"bootstrap over {unit}"
    return f"{level:.0%} CI, {how}"


def replicates_words(unit, n_boot) -> str:
    """How many replicates an interval of `unit` really drew: a jackknife over S sequences
    refits S times whatever n_boot says; a bootstrap draws n_boot."""
    unit = str(unit or "")
    if unit.startswith("jackknife over "):
        return f"{unit.split()[2]} leave-one-out fits"
    return f"{n_boot} replicates"
