"""docs/config.md's table of fields, generated from the sections' declarations
(sweep/config/sections.py, and the store format's `analysis:` and `study:`): one row per
field, in the order of the YAML, nested sections expanded in place. `python -m
sweep.config.docs` (or `make docs`) writes it between the page's markers;
tests/test_config_docs.py holds the page to it."""
from __future__ import annotations

import sys
from dataclasses import MISSING
from pathlib import Path

from sweep.config.sections import SweepConfig
from sweep.format.fields import declared, type_words

PAGE = Path(__file__).resolve().parents[2] / "docs" / "config.md"
BEGIN = ("<!-- the table below is generated from the declarations (sweep/config/sections.py, "
         "sweep/format/settings.py, sweep/format/study.py): edit them, then run "
         "`python -m sweep.config.docs` -->")
END = "<!-- end of the generated table -->"


def rows(cls=SweepConfig, prefix: str = "") -> list[str]:
    """Markdown rows of every declared field of section `cls`, nested ones expanded."""
    out = []
    for f in declared(cls):
        names = f.metadata["names"] or (f.name,)
        label = " / ".join(f"`{prefix}{n}`" for n in names)
        sub = f.metadata["section"]
        if sub is not None:
            kind = f.metadata["kind"] or "section"
            required = f.default is MISSING and f.default_factory is MISSING
            needed = "required" if required else "optional"
            out.append(f"| {label} | {kind}, {needed} | {_meaning(f)} |")
            if hasattr(sub, "doc_rows"):      # a section of its own grammar (`nulls:`: the registered kinds)
                out += [f"| `{prefix}{names[0]}.{n}` | {t} | {m} |" for n, t, m in sub.doc_rows()]
            else:
                out += rows(sub, f"{prefix}{names[0]}.")
        else:
            out.append(f"| {label} | {type_words(cls, f)} | {_meaning(f)} |")
    return out


def _meaning(f) -> str:
    see = f.metadata["see"]
    label = "below" if see and see.startswith("#") else see and see.split("#")[0]
    link = f" ([{label}]({see}))" if see else ""
    return f.metadata["help"].replace("|", "\\|") + link


def table() -> str:
    return "\n".join(["| field | type, default | meaning |", "|---|---|---|", *rows()])


def render(page: str) -> str:
    """`page` with the text between the markers replaced by the generated table."""
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main() -> int:
    text = PAGE.read_text()
    new = render(text)
    if new != text:
        PAGE.write_text(new)
        print(f"{PAGE}: fields table regenerated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
