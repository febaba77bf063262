"""Verdicts written from their numbers (analysis/studies/verdicts.py, analysis/report/docgen.py):
the rule table's categories from the rows' codes; a p moved across the level in a copy of the
committed docs/real JSON changes the sentence that docs/real.md renders; and no template in
docs/templates says what a table shows in words of its own: every verdict word sits inside a
generated field, or inside quotes or code when the text names an outcome rather than claims one.
"""
from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import pytest

from analysis.report.docgen import render
from analysis.studies import verdicts as v

ROOT = Path(__file__).resolve().parents[1]


def _row(kind, p, delta=-0.1, **kw):
    return {"kind": kind, "delta": delta, "level": 0.9, "p_holm": p, "label": "β", "layer": 7, **kw}


@pytest.mark.parametrize("rows, category", [
    ([_row("a", 0.01), _row("b", 0.02)], v.EVERY),
    ([_row("a", 0.01), _row("b", 0.5)], v.SOME),
    ([_row("a", 0.3), _row("b", 0.5)], v.NONE),
    ([_row("a", 0.3), _row("b", 0.05, code=v.WINDOW)], v.WINDOW),
    ([_row("a", 0.01), _row("b", 0.05, code=v.WINDOW)], v.SOME),
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


LAYER15_BETA = "models.smollm2.nulls_across_depth.rows"


def _render_real(tmp_path, edit=None) -> str:
    """docs/real.md rendered from a copy of the committed JSON, `edit` applied to the copy."""
    (tmp_path / "docs" / "templates").mkdir(parents=True)
    shutil.copytree(ROOT / "docs" / "real", tmp_path / "docs" / "real")
    shutil.copy(ROOT / "docs" / "templates" / "real.md", tmp_path / "docs" / "templates")
    if edit:
        path = tmp_path / "docs" / "real" / "layers-fits.json"
        doc = json.loads(path.read_text())
        edit(doc)
        path.write_text(json.dumps(doc))
    return render(tmp_path / "docs" / "templates" / "real.md", tmp_path)


def test_a_p_moved_across_the_level_changes_the_rendered_sentence(tmp_path):
    def beta(doc, layer, kind):
        return next(r for r in doc["models"]["smollm2"]["nulls_across_depth"]["rows"]
                    if r["layer"] == layer and r["kind"] == kind and "β" in r["observable"])

    committed = json.loads((ROOT / "docs" / "real" / "layers-fits.json").read_text())
    row = beta(committed, 15, "shuffled")
    assert row["p_adjusted"] < 1 - row["level"]                 # differs in the committed run
    before = _render_real(tmp_path / "a")

    def move(doc):
        beta(doc, 15, "shuffled")["p_adjusted"] = 0.5
    after = _render_real(tmp_path / "b", move)
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]
    assert changed, "moving a p across the level left docs/real.md as it was"
    (old, new), = [(a, b) for a, b in changed if "layer 15" in a and "β" in a]
    assert "differs from every kind it was tested against" in old
    assert "differs from random_init" in new and "no difference shown from shuffled" in new


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
