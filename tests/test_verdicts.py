"""Verdicts written from their numbers (analysis/studies/verdicts.py, analysis/report/docgen.py):
the rule table's categories from the rows' codes; a p moved across the level in a copy of the
committed docs/real JSON changes the sentence that docs/real.md renders; and no template in
docs/templates says what a table shows in words of its own: every verdict word sits inside a
generated field, or inside quotes or code when the text names an outcome rather than claims one.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from analysis.report.docgen import render, render_value
from analysis.studies import verdicts as v

ROOT = Path(__file__).resolve().parents[1]


def _row(kind, p, delta=-0.1, **kw):
    return {"kind": kind, "delta": delta, "level": 0.9, "p_holm": p, "label": "β", "layer": 7, **kw}


@pytest.mark.parametrize("rows, category", [
    ([_row("a", 0.01), _row("b", 0.02)], v.EVERY),
    ([_row("a", 0.01), _row("b", 0.5)], v.SOME),
    ([_row("a", 0.3), _row("b", 0.5)], v.NONE),
    ([_row("a", 0.3), _row("b", 0.5, code=v.WINDOW)], v.WINDOW),
    ([_row("a", 0.01), _row("b", 0.5, code=v.WINDOW)], v.SOME),
    ([_row("a", 0.5, code=v.DIFFERS), _row("b", 0.01, code=v.NONE)], v.SOME),   # numbers, not words
    ([_row("a", float("nan")), _row("b", None)], v.SHORT),
    ([_row("a", 0.01, check={"enough": False, "n": 86, "needs": 500,
                             "counts": "stable modes in the window"})], v.SHORT),
    ([_row("a", float("nan")), _row("b", 0.5)], v.NONE),
])
def test_the_rule_table(rows, category):
    assert v.category(rows) == category
    text = v.sentence(rows, "declared before the data")
    assert text.startswith("β at layer 7, at 90 % family-wise: ") and "nan" not in text
    assert all(r["kind"] in text for r in rows)


def test_each_category_has_one_sentence_and_the_status_is_said():
    assert set(v.SENTENCES) == set(v.CATEGORIES)
    rows = [_row("a", 0.01)]
    assert v.sentence(rows, "declared after the data").endswith("(declared after the data).")
    assert "exploratory, no study was declared" in v.sentence(rows)
    short = v.sentence([_row("a", 0.01, check={"enough": False, "n": 86, "needs": 500,
                                              "counts": "stable modes in the window"})])
    assert "n = 86 stable modes in the window, needs 500" in short and "differs" not in short


def test_the_window_rule_reads_the_family_declared_window_p():
    """A β row that misses the level at its family p is window-dependent exactly when its
    declared-window p, Holm-adjusted with the other rows as they are, clears it."""
    beta = dict(_row("a", 0.5, model="m", observable="beta", windows=[{"factor": 4}]), p=0.001)
    other = dict(_row("a", 0.5, model="m", observable="density"), p=0.2)
    assert v.written([beta], [beta, other])[0]["code"] == v.WINDOW      # Holm 0.002 < 0.1
    crowded = [beta] + [dict(other, layer=k, p=0.001) for k in range(200)]
    assert v.written([beta], crowded)[0]["code"] == v.NONE              # Holm 0.201 ≥ 0.1
    assert v.written([dict(beta, windows=[])], [beta, other])[0]["code"] == v.NONE


def test_a_parametric_p_prints_no_more_digits_than_its_method_has():
    """docgen's `pt`: the tables of docs/real.md print a t p below 1e-4 as "< 0.0001" (REFEREE 11)."""
    assert render_value(4.27e-08, "pt") == "< 0.0001"
    assert render_value(0.000352, "pt") == "0.00035" and render_value(1.0, "pt") == "1"


SOURCES = {"real": "fits.json", "layers": "layers-fits.json"}


def _render_real(tmp_path, source=None, edit=None) -> str:
    """docs/real.md rendered from a copy of the committed JSON, `edit` applied to the copy of
    docs/real/`source`."""
    (tmp_path / "docs" / "templates").mkdir(parents=True)
    shutil.copytree(ROOT / "docs" / "real", tmp_path / "docs" / "real")
    shutil.copy(ROOT / "docs" / "templates" / "real.md", tmp_path / "docs" / "templates")
    if edit:
        path = tmp_path / "docs" / "real" / source
        doc = json.loads(path.read_text())
        edit(doc)
        path.write_text(json.dumps(doc))
    return render(tmp_path / "docs" / "templates" / "real.md", tmp_path)


def _clause(line: str, kind: str) -> str:
    """The part of a rendered verdict sentence that gives `kind`'s outcome: its `;`-separated
    clause, without the sentence's 'what, at what level:' head."""
    clause = next(c for c in line.split("; ") if f"{kind} (Δ" in c)
    return clause.split("family-wise: ", 1)[-1]


@pytest.mark.parametrize("differed", [True, False], ids=["differs-to-not", "not-to-differs"])
@pytest.mark.parametrize("source", sorted(SOURCES), ids=lambda s: SOURCES[s])
def test_a_p_moved_across_the_level_changes_the_rendered_sentence(tmp_path, source, differed):
    """Whatever the committed numbers say: take the first declared row with a Holm p on the
    `differed` side of the level, move the p to the other side, and the sentence docs/real.md
    renders for it turns between "differs" and not."""
    committed = json.loads((ROOT / "docs" / "real" / SOURCES[source]).read_text())
    study = committed["study"]
    at = next((i for i, r in enumerate(study["rows"])
               if r["p_holm"] is not None and np.isfinite(r["p_holm"]) and r["check"]["enough"]
               and (r["p_holm"] < 1 - r["level"]) == differed), None)
    if at is None:
        pytest.skip(f"no declared row of {SOURCES[source]} is on that side of the level")
    row = study["rows"][at]
    alpha = 1 - row["level"]
    moved = 1.0 if differed else alpha / 100

    def move(doc):
        doc["study"]["rows"][at]["p_holm"] = moved

    before = _render_real(tmp_path / "a")
    after = _render_real(tmp_path / "b", SOURCES[source], move)
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines())
               if a != b and "family-wise: " in a]          # the sentences, not the tables' p
    what = f"{row['model']}: {row['label']} at layer {row['layer']}, "
    assert changed, "moving a p across the level left docs/real.md's sentences as they were"
    (old, new), = changed
    assert what in old, old
    assert _clause(old, row["kind"]).startswith("differs") == differed
    assert _clause(new, row["kind"]).startswith("differs") != differed


# words that say what a table shows; a template may hold them only in a generated field, or
# quoted ("differ", `differs`) where the text names an outcome instead of claiming one
VERDICT_WORDS = (r"learned(?! nothing)", r"the architecture's", r"order of magnitude", r"clearest",
                 r"differs?", r"distinguishable", r"no difference", r"disagrees?", r"agrees?",
                 r"consistent", r"stands", r"survives?", r"training's", r"set by training",
                 r"confirms?", r"dominates?", r"steeper", r"shallower", r"fits none",
                 r"(?:above|below) (?:both|every|all) (?:null )?kinds?", r"atypical")
VERDICT = re.compile(r"\b(" + "|".join(VERDICT_WORDS) + r")\b", re.IGNORECASE)
LAYER_RANGE = re.compile(r"\blayers? \d+\s*[–-]\s*\d+")
# a quote may run over a line break, never over a blank line
UNSAID = re.compile(r'\{\{.*?\}\}|`[^`]*`|"(?:[^"\n]|\n(?!\n))*"|“[^”]*”|\]\([^)]*\)', re.DOTALL)


def verdict_words(text: str) -> list:
    """[(line, word)] of every verdict word or typed layer range outside generated fields,
    code, quotes and link targets."""
    text = re.sub(r"```.*?```", lambda m: "\n" * m.group().count("\n"), text, flags=re.DOTALL)
    text = UNSAID.sub(lambda m: "\n" * m.group().count("\n"), text)
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        out += [(i, m.group()) for m in VERDICT.finditer(line)]
        out += [(i, m.group()) for m in LAYER_RANGE.finditer(line)]
    return out


def test_the_scan_finds_what_it_should():
    assert verdict_words("the window slope is learned at layers 7–22\n") == \
        [(1, "learned"), (1, "layers 7–22")]
    assert verdict_words('a verdict "differs" and `no difference` {{r:x|verdict}} learned nothing\n') == []


@pytest.mark.parametrize("template", sorted((ROOT / "docs" / "templates").glob("*.md")),
                         ids=lambda p: p.name)
def test_no_verdict_word_outside_a_generated_field(template):
    found = verdict_words(template.read_text())
    assert not found, f"{template.name}: " + "; ".join(f"line {i}: {w!r}" for i, w in found[:20])
