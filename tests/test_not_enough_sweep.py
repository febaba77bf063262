"""Issue 57 item 2 on a deliberately tiny sweep: a 4-layer LLaMA on 2 sequences of 8 tokens,
with 2 random_init nulls, swept through the real CLI on a real LocalCluster. β has far fewer
than its 500 modes in the window and the self-averaging lines have too few points, so every
view must say "not enough data (n = …, needs …)" with no verdict beside it: the report, the
console, `tdos status --spectra`, the Python API and fits.json. Nothing prints "nan".
"""
from __future__ import annotations

import json
import re

import pytest
import torch
from families import DEEPEST, tiny_model

from analysis import open_store
from analysis.fit.enough import MINIMUMS
from analysis.measure.run import measure
from sweep.cli import main
from sweep.format.settings import Settings

VERDICT_WORDS = ("distinguishable", "differs", "no difference", "consistent", "not rejected",
                 "rejected", "overlap", "holds")
NAN = re.compile(r"\bnan\b", re.I)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    tiny_model("llama", torch.Generator().manual_seed(3)).save_pretrained(root / "llama")
    (root / "c.yaml").write_text(json.dumps({
        "model": {"path": str(root / "llama"), "name": "llama", "nulls": {"random_init": 2}},
        "inputs": {"sequences": 2, "length": 8, "seed": 0}, "layers": [DEEPEST],
        "store": str(root / "s.zarr"), "compute": {"token_block": 8, "live_every": 0},
        "cluster": {"kind": "local", "workers": 1}}))
    assert main(["sweep", str(root / "c.yaml")]) == 0
    return root


def _short_lines(text):
    return [ln for ln in text.splitlines() if "not enough data" in ln]


def test_the_report_and_the_console_say_not_enough_data_and_no_verdict(tiny, capsys):
    capsys.readouterr()
    assert main(["analyze", str(tiny / "s.zarr"), "--out", str(tiny / "r")]) == 0
    console = capsys.readouterr().out
    report = (tiny / "r" / "report.md").read_text()
    for text in (console, report):
        assert not NAN.search(text), NAN.search(text)
        short = _short_lines(text)
        assert any(f"needs {MINIMUMS['beta'].needs}" in ln for ln in short), short
        for ln in short:       # the reason, never a verdict read from numbers that are not there
            said = ln.split("not enough data", 1)[1]
            assert not any(w in said.split(";")[0] for w in VERDICT_WORDS), ln


def test_status_says_not_enough_data(tiny, capsys):
    capsys.readouterr()
    assert main(["status", str(tiny / "s.zarr"), "--spectra"]) == 0
    out = capsys.readouterr().out
    assert not NAN.search(out) and "not enough data" in out, out


def test_the_python_api_and_fits_json_carry_the_check_not_a_verdict(tiny):
    st = open_store(tiny / "s.zarr", "llama")
    h = st.beta(DEEPEST, 8)
    assert not h.check and h.value() == h.check.text and "needs 500" in h.value()
    analysis = measure(tiny / "s.zarr", Settings())
    nulls = analysis["llama"].nulls
    beta = next(c for c in nulls.comparisons if c.key == "beta")
    assert not beta.check and "not enough data" in beta.verdict
    fits = json.loads((tiny / "r" / "fits.json").read_text()) if (tiny / "r").exists() else None
    if fits is None:
        assert main(["analyze", str(tiny / "s.zarr"), "--out", str(tiny / "r"), "--quiet"]) == 0
        fits = json.loads((tiny / "r" / "fits.json").read_text())
    assert "NaN" not in (tiny / "r" / "fits.json").read_text()

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("verdict"), str):
                yield node
            for v in node.values():
                yield from walk(v)
        elif isinstance(node, list):
            for v in node:
                yield from walk(v)
    verdicts = list(walk(fits))
    assert verdicts
    for v in verdicts:     # a verdict stands only beside numbers; a missing one says why
        missing = any(v.get(k) is None for k in ("delta", "p_raw", "p_adjusted") if k in v)
        assert not missing or "not enough data" in v["verdict"], v
