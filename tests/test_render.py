"""Issue 55 items 3 and 7: `tdos analyze` measures, then renders. `measure` returns one
immutable analysis made by a registry of studies (a new study is one registration);
`render` draws and writes it, imports no fit, law or study, writes every file once and
records no absolute path. Stores written by the real writer (synthetic_store)."""
from __future__ import annotations

import ast
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr
from synthetic_store import null_models, synthetic_model, write_store

from analysis.measure.registry import REGISTRY, Registration
from analysis.measure.run import measure
from analysis.report.outputs import Outputs
from analysis.report.render import render
from sweep.format.settings import Settings

REPO = Path(__file__).resolve().parents[1]
RENDER = REPO / "analysis" / "report"
DOORS = ("analyze", "docgen")  # analyze.py: measure, then render; docgen.py: `make docs`
COMPUTING = ("analysis.fit", "analysis.laws", "analysis.studies", "analysis.measure",
             "analysis.io", "analysis.spectrum", "scipy.stats", "scipy.optimize")
SETTINGS = Settings(n_boot=20, lengths=(16,))


def render_modules() -> list[str]:
    return sorted(f"analysis.report.{p.stem}" for p in RENDER.glob("*.py")
                  if p.stem not in ("__init__", *DOORS))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Trained model `a` with two random_init nulls, its text read from an absolute path."""
    tmp = tmp_path_factory.mktemp("render")
    kw = dict(nseq=2, lmax=16, d=32, n_ir=16)
    a = synthetic_model("a", "attention", -0.2, rows=2, layers=[0, 1], **kw)
    path = write_store(tmp / "out" / "s.zarr", [a, *null_models(a, -0.5, n=2, **kw)])
    corpus = tmp / "corpus" / "text.txt"
    corpus.parent.mkdir()
    corpus.write_text("the text the tokens came from\n")
    g = zarr.open_group(str(path), mode="r+")["a"]
    g.attrs["inputs"] = {**g.attrs["inputs"], "text": str(corpus), "text_files": [str(corpus)]}
    return path, corpus


@pytest.fixture(scope="module")
def measured(store):
    return measure(store[0], SETTINGS)


def test_render_imports_no_fit_law_or_study():
    """A fresh interpreter that imports every renderer has loaded nothing that computes."""
    code = (f"import importlib, sys\nfor m in {render_modules()!r}: importlib.import_module(m)\n"
            f"print(' '.join(sorted(n for n in sys.modules if n.startswith({COMPUTING!r}))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         check=True).stdout
    assert len(render_modules()) > 10 and out.strip() == ""


def test_the_check_catches_a_renderer_that_fits(tmp_path):
    """A test of the test: one import of a fit in a copy of the renderers is found."""
    import shutil
    shutil.copytree(REPO / "analysis", tmp_path / "analysis")
    shutil.copytree(REPO / "sweep" / "format", tmp_path / "sweep" / "format")
    (tmp_path / "sweep" / "__init__.py").write_text("")
    planted = tmp_path / "analysis" / "report" / "text.py"
    planted.write_text(planted.read_text() + "\nfrom analysis.fit.gof import power_law_gof\n")
    code = ("import sys\nimport analysis.report.text\n"
            "print(any(n.startswith('analysis.fit') for n in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)}).stdout
    assert out.strip() == "True"


def test_no_renderer_opens_a_file_but_the_one_writer():
    """Only report/outputs.py writes (each name once): no renderer opens, appends to or saves
    a file of its own."""
    writes = ("open", "write_text", "write_bytes", "savefig", "save", "to_csv", "dump")
    found = []
    for p in sorted(RENDER.glob("*.py")):
        if p.stem in ("outputs", *DOORS):              # docgen writes docs/, not a report
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                if name in writes:
                    found.append(f"{p.name}:{node.lineno} {name}")
    assert found == []


def test_render_writes_every_file_once_and_last_the_report(measured, tmp_path):
    written = render(measured, tmp_path / "r")
    on_disk = sorted(str(p.relative_to(tmp_path / "r")) for p in (tmp_path / "r").rglob("*")
                     if p.is_file())
    assert len(written) == len(set(written)) and sorted(written) == on_disk
    assert written[-2:] == ["fits.json", "report.md"] and "tdos_vs_nulls.png" in written
    md = (tmp_path / "r" / "report.md").read_text()
    assert all(f"![{f}]({f})" in md for f in written if f.endswith(".png"))
    o = Outputs(tmp_path / "twice")
    o.add("fits.json", "{}")
    with pytest.raises(RuntimeError, match="fits.json was written already"):
        o.add("fits.json", "{}")


def test_the_analysis_is_immutable(measured):
    r = measured["a"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        measured.store = "elsewhere"
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.layer = 1
    with pytest.raises(TypeError):
        r.results["nulls"] = None
    with pytest.raises(TypeError):
        measured.models["b"] = r
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.table.rows[0].by_mode["all-stable"].gof_p = 0.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.nulls.comparisons[0].p_adjusted = 0.0
    # the null study is the one counted in the report's family, every p adjusted there
    assert r.nulls.family_m == measured.family.m > 0
    assert len(measured.family.tests) == len(r.nulls.comparisons)
    np.testing.assert_array_equal([c.p_adjusted for c in r.nulls.comparisons],
                                  [t.p_adjusted for t in measured.family.tests])
    assert measured.study is not None and measured.declared is None   # no study: declared


def test_results_name_no_machine(measured, store, tmp_path):
    """fits.json records the store relative to its own folder and every other path relative
    to the store (a committed result names no checkout)."""
    path, corpus = store
    out = tmp_path / "elsewhere" / "report"
    render(measured, out)
    doc = json.loads((out / "fits.json").read_text())

    def strings(o):
        if isinstance(o, dict):
            return [s for v in o.values() for s in strings(v)]
        if isinstance(o, list):
            return [s for v in o for s in strings(v)]
        return [o] if isinstance(o, str) else []

    assert not [s for s in strings(doc) if s.startswith("/")]
    assert os.path.samefile(out / doc["store"], path)
    inputs = doc["models"]["a"]["inputs"]
    assert os.path.samefile(Path(path) / inputs["text"], corpus)
    assert os.path.samefile(Path(path) / inputs["text_files"][0], corpus)
    assert f"# tdos analysis of `{doc['store']}`" in (out / "report.md").read_text()


def test_a_study_is_one_registration(store, tmp_path):
    """A study added by one row of the registry is measured for every model, read as an
    attribute of its analysis and written into fits.json under its name."""
    @dataclasses.dataclass(frozen=True)
    class TokensRead:
        n: int

        def to_dict(self):
            return {"tokens_read": self.n}

    extra = Registration("tokens_read", "model",
                         lambda m: TokensRead(int(m.agg.token_done(m.layer).sum())),
                         "tokens the representative layer read")
    a = measure(store[0], SETTINGS, registry=(*REGISTRY, extra))
    assert a["a"].tokens_read == TokensRead(2 * 16)
    render(a, tmp_path / "r")
    doc = json.loads((tmp_path / "r" / "fits.json").read_text())
    assert doc["models"]["a"]["tokens_read"] == {"tokens_read": 32}
    with pytest.raises(ValueError, match="names used twice"):
        measure(store[0], SETTINGS, registry=(*REGISTRY, REGISTRY[1]))


def _curved(model, seed):
    """`model` with its infrared rates drawn log-normal about 3e-3: a curved density in the
    window, so the power law is rejected and its β is a window slope."""
    rng = np.random.default_rng(seed)
    ev, n_ir = model.eigenvalues.copy(), 16
    lam = np.exp(rng.normal(np.log(3e-3), 0.8, ev.shape[:3] + (n_ir,)))
    ev[..., :n_ir] = np.exp(-lam + 1j * rng.normal(0, 0.2, lam.shape))
    return dataclasses.replace(model, eigenvalues=ev)


def test_the_first_table_reads_the_window_slope_and_lists_its_nulls(tmp_path):
    """Issue 57 item 1: a store with nulls whose power law is rejected (β a window slope) and
    a declared study: the report opens with its answer, whose first table lists the nulls and
    the declared family's verdicts; every wide table comes after it."""
    from sweep.format.study import HISTORY, STUDY, Study

    kw = dict(nseq=2, lmax=32, d=32, n_ir=16)
    a = _curved(synthetic_model("a", "attention", -0.2, rows=1, **kw), 7)
    path = write_store(tmp_path / "s.zarr", [a, *null_models(a, -0.5, n=2, **kw)])
    record = Study(layers=(0,), observables=("beta", "density"), against=("random_init",),
                   level=0.9).record("2026-12-07T00:00:00+00:00", False)
    root = zarr.open_group(str(path), mode="r+")
    root.attrs[STUDY], root.attrs[HISTORY] = record, [record]
    an = measure(path, SETTINGS)
    r = an["a"]
    assert r.headline.power_law_rejected and an.declared is not None
    assert [c.observable for c in r.nulls.comparisons if c.key == "beta"] == [
        "window slope β (mle:symmetry-removed)"]
    render(an, tmp_path / "r")
    md = (tmp_path / "r" / "report.md").read_text().splitlines()
    answer = md.index("## The answer")
    first_table = next(i for i, x in enumerate(md) if x.startswith("|"))
    wide = next(i for i, x in enumerate(md) if x.startswith("|") and x.count("|") > 13)
    assert answer < first_table < wide
    assert any("a window slope, not an exponent" in x for x in md[answer:first_table])
    assert any("window slope β (mle:symmetry-removed) against its 2 random_init nulls" in x
               for x in md[answer:first_table])
    sentences = [v["sentence"] for v in an.declared.verdicts()]
    assert len(sentences) == 2 and all(f"  - declared: {s}" in md[answer:first_table]
                                        for s in sentences)
    head = next(i for i, x in enumerate(md) if x.startswith("| primary estimator"))
    assert "against its nulls (exploratory)" in md[head]
    row = md[head + 2]
    assert "no nulls in the store" not in row and "random_init nulls" in row
    assert "β: a window slope, not an exponent" in row
    declared = md.index("| observable | layer | against | Δ [CI] | p Holm (p from) | code |")
    assert head < declared < wide
    doc = json.loads((tmp_path / "r" / "fits.json").read_text())
    assert [x["observable"] for x in doc["study"]["rows"]] == ["beta", "density"]
    assert {"positions_dropped", "density_shape", "beta_by_position"} <= set(doc)


def test_compare_json_names_no_machine(tmp_path):
    """compare.json: each model's store relative to the folder it is written in, and it says so."""
    from analysis.report.compare import write_comparison
    from analysis.studies.compare import compare_models

    kw = dict(nseq=2, lmax=16, d=32, n_ir=16, rows=1)
    path = write_store(tmp_path / "out" / "t.zarr", [synthetic_model("a", "attention", -0.2, **kw),
                                                     synthetic_model("b", "gpt_neox", -0.2, **kw)])
    out = tmp_path / "elsewhere" / "cmp"
    files = write_comparison(compare_models([str(path)], SETTINGS), out)
    doc = json.loads((out / "compare.json").read_text())
    assert "compare.json" in files and "relative" in doc["paths"]
    assert all(os.path.samefile(out / m["store"], path) for m in doc["models"])
    assert not [m["store"] for m in doc["models"] if m["store"].startswith("/")]
