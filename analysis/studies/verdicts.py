"""Verdicts written from their numbers: one rule table from a set of test rows to a verdict
category, and one sentence per category (docs/analysis.md, "The rule table").

Every verdict sentence in report.md and in the generated docs comes from here: a template or
a renderer passes the rows (an observable at one layer against each null kind it was tested
against), never a word of its own, so new numbers give new words (REFEREE 15, 16).

A row is a dict as fits.json holds it: what its Δ is against (`kind`; `b`, the other model of
a pair; else 0), `delta` (or `delta_beta`, `delta_density`), `level`, its Holm-adjusted p
(`p_holm`, or `p_adjusted` in the older families), its minimum's `check`, and for a declared
β test its declared-window `p` and its moved `windows`. Each row gets one code (`row_code`),
written from those numbers, never read from a stored word, so a p moved across the level
moves the sentence:

| code | when |
|---|---|
| not enough data | the row carries a failed minimum, or no p |
| differs | Holm p < 1 − level |
| window-dependent | otherwise, for a row with moved windows whose declared-window p, Holm-adjusted in its family (the other rows as they are), is < 1 − level (studies/study.py's rule; without the family at hand, the study's own `code` says it) |
| no difference shown | otherwise |

and a set of rows one category, the first rule of `RULES` that holds:

| category | rule |
|---|---|
| not enough data | every row is "not enough data" |
| differs from every declared kind | every row "differs" |
| differs from some | at least one row "differs" |
| window-dependent | at least one row "window-dependent" (none "differs") |
| no difference shown | otherwise |
"""
from __future__ import annotations

import math

from analysis._format import format_p
from analysis.fit.multiplicity import holm

SHORT, WINDOW, DIFFERS, NONE = "not enough data", "window-dependent", "differs", "no difference shown"
CODES = (SHORT, WINDOW, DIFFERS, NONE)

EVERY, SOME = "differs from every declared kind", "differs from some"
RULES = (
    (SHORT, lambda codes: all(c == SHORT for c in codes)),
    (EVERY, lambda codes: all(c == DIFFERS for c in codes)),
    (SOME, lambda codes: DIFFERS in codes),
    (WINDOW, lambda codes: WINDOW in codes),
    (NONE, lambda codes: True),
)
CATEGORIES = tuple(name for name, _ in RULES)


def _p(row):
    p = row.get("p_holm", row.get("p_adjusted"))
    return float(p) if p is not None and math.isfinite(float(p)) else math.nan


def row_code(row: dict, p_declared: float | None = None) -> str:
    """The code of one test row from its numbers (module docstring); `p_declared`: its
    declared-window p Holm-adjusted in its family (`declared_holm`), None when the family is
    not at hand."""
    check = row.get("check") or {}
    p, alpha = _p(row), 1 - float(row["level"])
    if check.get("enough") is False or not math.isfinite(p):
        return SHORT
    if p < alpha:
        return DIFFERS
    if p_declared is None:
        return WINDOW if row.get("code") == WINDOW else NONE
    return WINDOW if row.get("windows") and p_declared < alpha else NONE


def _key(row) -> tuple:
    return tuple(row.get(k) for k in ("model", "observable", "layer", "kind"))


def declared_holm(family) -> dict:
    """{(model, observable, layer, kind): Holm p of the declared-window p} over the rows of a
    declared study's family: what tells a β row that misses the level across the moved windows
    from one that misses it at the declared window too (studies/study.py, `_family`)."""
    p = [float(r["p"]) if r.get("p") is not None else math.nan for r in family]
    return dict(zip((_key(r) for r in family), holm(p)))


def written(rows, family=None) -> list:
    """The rows with `code` written from their numbers; `family`: every row of their declared
    study (for the window-dependent rule), or None."""
    held = declared_holm(family) if family is not None else {}
    return [{**r, "code": row_code(r, held.get(_key(r)))} for r in _as_list(rows)]


def category(rows) -> str:
    """The first category of RULES whose rule holds for the rows' codes."""
    codes = [row_code(r) for r in _as_list(rows)]
    if not codes:
        raise ValueError("no test rows to write a verdict from")
    return next(name for name, rule in RULES if rule(codes))


def _as_list(rows) -> list:
    return [rows] if isinstance(rows, dict) else list(rows)


def _sign(x) -> str:
    """A difference as the docs print it: 3 significant digits, its sign, U+2212 for minus."""
    return format(x, "+.3g").replace("-", "\u2212")


def _against(row) -> str:
    """What the row's Δ is taken against: a null kind, the other model of a pair, or 0."""
    return str(row.get("kind") or row.get("b") or "0")


def _delta(row) -> float:
    return next(float(row[k]) for k in ("delta", "delta_beta", "delta_density") if k in row)


def _what(rows) -> str:
    r = rows[0]
    name = r.get("label") or r.get("observable") or r.get("name") or r.get("a") or "the test"
    where = [f"layer {r['layer']}"] if r.get("layer") is not None else []
    where += [f"L = {r['L']}"] if "a" in r and r.get("L") is not None else []
    name = f"{r['model']}: {name}" if r.get("model") else name
    return f"{name} at {', '.join(where)}" if where else name


def _numbers(row) -> str:
    """'random_init (Δ = −0.105, Holm p 0.0031)', or the row's shortfall."""
    if row_code(row) == SHORT:
        check = row.get("check") or {}
        n = (f"n = {check['n']:,} {check['counts']}, needs {check['needs']:,}"
             if "n" in check else "no p")
        return f"{_against(row)} (not enough data: {n})"
    p = format_p(_p(row), row.get("p_method", "normal")).replace("-", "\u2212")
    return f"{_against(row)} (Δ = {_sign(_delta(row))}, Holm p {p})"


def _by_code(rows, code) -> list:
    return [r for r in rows if row_code(r) == code]


WORDS = {DIFFERS: "differs from", WINDOW: "window-dependent against",
         NONE: "no difference shown from", SHORT: "no verdict against"}


def _list(rows, code) -> str:
    return ", ".join(_numbers(r) for r in _by_code(rows, code))


def _others(rows, skip) -> str:
    """'; no difference shown from shuffled (…)' for the rows whose code is not `skip`."""
    return "".join(f"; {WORDS[c]} {_list(rows, c)}" for c in CODES
                   if c != skip and _by_code(rows, c))


SENTENCES = {
    SHORT: lambda rows: f"no verdict, not enough data — {_list(rows, SHORT)}",
    EVERY: lambda rows: (f"differs from every kind it was tested against — {_list(rows, DIFFERS)}"
                         if len(rows) > 1 else f"differs from {_list(rows, DIFFERS)}"),
    SOME: lambda rows: f"differs from {_list(rows, DIFFERS)}" + _others(rows, DIFFERS),
    WINDOW: lambda rows: (f"window-dependent — the difference from {_list(rows, WINDOW)} clears the "
                          f"family at the declared window but not at every window with an edge "
                          f"moved by the documented factors" + _others(rows, WINDOW)),
    NONE: lambda rows: f"no difference shown from {_list(rows, NONE)}" + _others(rows, NONE),
}


def sentence(rows, status: str | None = None, family=None) -> str:
    """The one sentence of the rows' category; `status` says how the family was declared
    ("declared before the data", "declared after the data", or None: no declared study,
    which the sentence then says it is); `family`: every row of the declared study the rows
    belong to (`written`)."""
    rows = written(rows, family)
    text = (f"{_what(rows)}, at {float(rows[0]['level']) * 100:g} % family-wise: "
            f"{SENTENCES[category(rows)](rows)}")
    if status is None:
        return text + " (a family fixed after the data: exploratory, no study was declared)."
    if status != "declared before the data":
        return text + f" ({status})."
    return text + "."
