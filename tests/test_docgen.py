"""Docs quote generated numbers only: every page in docs/templates renders, from the committed
JSON it names, to exactly the page committed in docs/ (analysis/report/docgen.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.report.docgen import DocError, render, render_all

ROOT = Path(__file__).resolve().parents[1]


def _template(tmp_path, body, doc):
    (tmp_path / "r.json").write_text(json.dumps(doc))
    t = tmp_path / "t.md"
    t.write_text("<!-- docgen: run=r.json -->\n" + body)
    return t


def test_paths_picks_and_formats(tmp_path):
    doc = {"models": {"m": {"table1": [{"L": 8, "beta": 0.5}, {"L": 128, "beta": -0.1234,
                                                               "ci": [-0.2, 0.01]}],
                            "n": 12345, "share": 0.553, "unit": "sequences"}}}
    body = ("β = {{run:models.m.table1[L=128].beta|+.3f}} {{run:models.m.table1[L=128].ci|ci+.2f}}, "
            "{{run:models.m.n|,d}} modes, {{run:models.m.share|%.0f}} out, by {{run:models.m.unit}}, "
            "first L {{run:models.m.table1[0].L}}\n")
    out = render(_template(tmp_path, body, doc), tmp_path)
    assert out.splitlines()[1] == ("β = \u22120.123 [\u22120.20, +0.01], 12,345 modes, 55 % out, "
                                   "by sequences, first L 8")


def test_a_true_or_false_prints_as_yes_or_no(tmp_path):
    doc = {"study": {"changed": False, "after_data": True, "m": 0}}
    body = "{{run:study.changed}} {{run:study.after_data}} {{run:study.m}}\n"
    assert render(_template(tmp_path, body, doc), tmp_path).splitlines()[1] == "no yes 0"


def test_a_pick_by_two_keys(tmp_path):
    doc = {"tests": [{"obs": "beta", "kind": "random_init", "p": 0.01},
                     {"obs": "beta", "kind": "shuffled", "p": 0.2}]}
    out = render(_template(tmp_path, "{{run:tests[obs=beta&kind=shuffled].p|.2f}}\n", doc), tmp_path)
    assert out.splitlines()[1] == "0.20"
    with pytest.raises(DocError, match="obs = gamma|obs=gamma"):
        render(_template(tmp_path, "{{run:tests[obs=gamma&kind=shuffled].p}}\n", doc), tmp_path)


def test_a_missing_path_names_the_line(tmp_path):
    t = _template(tmp_path, "line one\n{{run:models.x.beta|+.3f}}\n", {"models": {}})
    with pytest.raises(DocError, match=r"t\.md:3: .*models\.x\.beta.*not in r\.json"):
        render(t, tmp_path)


def test_an_unknown_source_is_refused(tmp_path):
    t = _template(tmp_path, "{{other:a}}\n", {"a": 1})
    with pytest.raises(DocError, match="source 'other' is not named"):
        render(t, tmp_path)


def test_picks_by_several_keys_and_substring_and_an_underflowed_p(tmp_path):
    doc = {"tests": [{"kind": "random_init", "observable": "window slope β (mle)", "p": 0.5},
                     {"kind": "shuffled", "observable": "log ‖J‖²", "p": 0.25},
                     {"kind": "shuffled", "observable": "window slope β (mle)", "p": 0.125}]}
    body = "{{run:tests[kind=shuffled&observable~=β].p}} {{run:tests[observable~=J].p}}\n"
    assert render(_template(tmp_path, body, doc), tmp_path).splitlines()[1] == "0.125 0.25"
    zero = _template(tmp_path, "{{run:tests[0].q|p.2g}} {{run:tests[1].q|p.2g}}\n",
                     {"tests": [{"q": 0.0}, {"q": 3.14e-7}]})
    assert render(zero, tmp_path).splitlines()[1] == "< 1e\u2212300 3.1e\u221207"
    t = _template(tmp_path, "{{run:tests[kind=shuffled&observable~=γ].p}}\n", doc)
    with pytest.raises(DocError, match="no element with kind=shuffled&observable~=γ"):
        render(t, tmp_path)


def test_committed_docs_are_their_templates_rendered():
    """Every page generated from docs/templates is committed exactly as its template renders
    from the committed JSON it names: a number retyped in the page, or a JSON re-run without
    `make docs`, fails here."""
    pages = render_all(ROOT / "docs" / "templates", ROOT / "docs", ROOT)
    assert pages, "no template in docs/templates"
    for path, text in pages.items():
        assert path.read_text() == text, f"{path.relative_to(ROOT)} differs from its template: run make docs"
