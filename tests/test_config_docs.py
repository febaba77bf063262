"""One declaration per config section (sweep/format/fields.py): docs/config.md's table, the
YAML fields the loader accepts and the flags of `tdos analyze` / `tdos compare` are all made
from it, so a field added in one place appears in all of them, and the page cannot go stale."""
from __future__ import annotations

import argparse
import dataclasses

import pytest

from analysis.cli import compare_parser, parser
from sweep.checkpoints import kinds
from sweep.config import docs
from sweep.config.load import ConfigError, config_from_dict
from sweep.config.sections import SweepConfig
from sweep.format.fields import at_least, declared, option, plain_help, yaml_names
from sweep.format.settings import Settings


def test_config_md_is_the_generated_table():
    page = docs.PAGE.read_text()
    assert docs.render(page) == page, "docs/config.md is stale: run `python -m sweep.config.docs`"


def test_a_stale_page_is_caught():
    page = docs.PAGE.read_text()
    stale = page.replace("| `compute.token_block` |", "| `compute.tokens_per_task` |")
    assert stale != page and docs.render(stale) == page


def test_every_declared_field_has_its_row_and_nothing_else_does():
    rows = docs.table().splitlines()[2:]
    labels = [r.split(" | ")[0].lstrip("| ") for r in rows]

    def expected(cls, prefix):
        for f in declared(cls):
            names = f.metadata["names"] or (f.name,)
            yield " / ".join(f"`{prefix}{n}`" for n in names)
            sub = f.metadata["section"]
            if hasattr(sub, "doc_rows"):        # `nulls:`: a row per registered null kind
                yield from (f"`{prefix}{names[0]}.{n}`" for n, _, _ in sub.doc_rows())
            elif sub is not None:
                yield from expected(sub, f"{prefix}{names[0]}.")
    assert labels == list(expected(SweepConfig, ""))
    assert "`analysis.window`" in labels and "`study.against`" in labels
    assert {f"`model.nulls.{k}`" for k in kinds.names("null") if k in kinds.OWN} <= set(labels)


def test_a_new_field_reaches_the_table_with_its_words():
    """A test-only section: its declaration alone makes its rows."""
    @dataclasses.dataclass(frozen=True)
    class Probe:
        width: int = option(4, "how wide", check=at_least(2, "e.g. 4"), see="scale.md")
        label: str | None = option(None, "what it is called")
    assert docs.rows(Probe, "probe.") == [
        "| `probe.width` | integer >= 2, default 4 | how wide ([scale.md](scale.md)) |",
        "| `probe.label` | string, default null | what it is called |"]
    assert yaml_names(Probe) == ("width", "label")


def _flags(p: argparse.ArgumentParser) -> dict:
    return {a.dest: a for a in p._actions if a.option_strings}


@pytest.mark.parametrize("make", [parser, compare_parser])
def test_analyze_and_compare_flags_are_the_settings_fields(make):
    flags = _flags(make())
    for f in declared(Settings):
        assert f.name in flags, f.name
        assert flags[f.name].option_strings == [f"--{f.name.replace('_', '-')}"]
        assert flags[f.name].help.replace("%%", "%").startswith(plain_help(f))
    settings = {f.name for f in declared(Settings)}
    assert set(flags) - settings == ({"help", "out", "model", "quiet"} if make is parser
                                     else {"help", "out", "quiet"})


def _config(tmp_path, **section):
    return {"model": {"path": "x"}, "inputs": {"sequences": 1, "length": 8}, "layers": [0],
            "store": str(tmp_path / "s.zarr"), **section}


@pytest.mark.parametrize("section, cls", [("compute", "ComputeConfig"), ("analysis", Settings),
                                          ("memory", "MemoryConfig"), ("depth", "DepthConfig")])
def test_the_loader_accepts_exactly_the_declared_fields(tmp_path, section, cls):
    from sweep.config import sections
    cls = getattr(sections, cls) if isinstance(cls, str) else cls
    with pytest.raises(ConfigError) as e:
        config_from_dict(_config(tmp_path, **{section: {"no_such_field": 1}}))
    assert str(e.value) == (f"{section}.no_such_field: unknown field (known: "
                            f"{', '.join(yaml_names(cls))})")
