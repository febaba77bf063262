"""Docs whose numbers come from committed results: a template's placeholders filled from JSON.

A number a page quotes from a run (the demo, the real model) is never typed by hand: the page's
source is a template in docs/templates/, whose first line names the JSON files it reads,

    <!-- docgen: demo=docs/demo/fits.json compare=docs/demo/compare.json -->

and whose placeholders name a value in one of them and how to print it:

    {{demo:models.mamba.primary.headline.beta|+.3f}}       ->  −0.105
    {{demo:models.mamba.table1[L=128].by_mode.all-stable.ci|ci+.3f}}  ->  [−0.376, −0.331]
    {{demo:models.neox.blocks.done|,d}}                     ->  1,024

A path is dotted keys; `name[key=value]` picks the element of a list of objects whose `key`
equals `value` (numbers compared as numbers), `name[key~=text]` the one whose `key` contains
`text`, `name[kind=shuffled&observable~=β]` the one meeting both, `name[3]` the fourth element,
and `name[*layer=15]` the list of every element meeting the conditions. The format is
Python's format spec; `ci` before it prints a pair as an interval, `%` prints a fraction as a
percentage, `p` prints a p-value that underflowed to 0 as "< 1e−300", `pt` a t or normal p
to the resolution its method has (analysis._format.format_p: below 1e−4 as "< 0.0001"), `len`
the length of a list or object; a true/false value prints as yes/no; a minus sign prints as
U+2212, as the docs write it. A path that does not resolve is an error naming the template
line, so a renamed field cannot leave a stale number.

`verdict` prints the sentence of analysis/studies/verdicts.py's rule table for the test rows
at the path (one row, or a `[*…]` list): the only way a template says what a table shows. The
sentence is written from the rows' numbers (their Holm p against their level; for the rows of
the source's declared `study`, the window rule reads the whole family's declared-window p), never
from a stored verdict word. Rows of the declared `study` carry its status; rows of any other
family are said to be exploratory by the sentence itself.

`make docs` renders every template into docs/; tests/test_docgen.py renders them again from
the committed JSON and compares byte for byte.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from analysis._format import format_p
from analysis.studies import verdicts

HEADER = re.compile(r"<!--\s*docgen:(?P<sources>[^>]*)-->\s*\n")
PLACEHOLDER = re.compile(r"\{\{(?P<source>[\w-]+):(?P<path>[^|}]+)(?:\|(?P<fmt>[^}]*))?\}\}")
SEGMENT = re.compile(r"(?P<key>[^.\[]+)(?P<picks>(?:\[[^\]]*\])*)")


class DocError(ValueError):
    """A template that cannot be rendered: the message names the template, line and path."""


def _pick(value, pick: str, path: str):
    """`value[pick]`: an index, or the first list element that meets every condition of
    `pick` (joined by `&`): `key=value` equal, `key~=text` containing text; with a leading `*`,
    the list of every element that meets them (at least one)."""
    if "=" not in pick:
        return value[int(pick)]
    if pick.startswith("*"):
        conditions = [c.split("=", 1) for c in pick[1:].split("&")]
        found = [item for item in value if isinstance(item, dict)
                 and all(_meets(item, key, want) for key, want in conditions)]
        if not found:
            raise KeyError(f"no element with {pick[1:]} in {path}")
        return found
    conditions = [c.split("=", 1) for c in pick.split("&")]
    for item in value:
        if isinstance(item, dict) and all(_meets(item, key, want) for key, want in conditions):
            return item
    raise KeyError(f"no element with {pick} in {path}")


def _meets(item: dict, key: str, want: str) -> bool:
    if key.endswith("~"):
        got = item.get(key[:-1])
        return got is not None and want in str(got)
    got = item.get(key)
    return got is not None and (str(got) == want or _same_number(got, want))


def _same_number(got, want: str) -> bool:
    try:
        return float(got) == float(want)
    except (TypeError, ValueError):
        return False


def resolve(doc, path: str):
    """The value at dotted `path` in the JSON document `doc` (module docstring)."""
    value = doc
    for m in SEGMENT.finditer(path):
        value = value[m["key"]]
        for pick in re.findall(r"\[([^\]]*)\]", m["picks"]):
            value = _pick(value, pick, path)
    return value


def _sign(text: str) -> str:
    return text.replace("-", "\u2212")


def render_value(value, fmt: str | None) -> str:
    """`value` printed by `fmt` (module docstring)."""
    fmt = fmt or ""
    if fmt == "len":
        return str(len(value))
    if fmt.startswith("ci"):
        lo, hi = value
        return f"[{render_value(lo, fmt[2:])}, {render_value(hi, fmt[2:])}]"
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if fmt == "pt":
        return _sign(format_p(value))   # no more digits than a handful of sequences pin down
    if fmt.startswith("p") and value == 0:
        return "< 1e\u2212300"          # a p that underflowed: the float says no more than that
    if fmt.startswith("p"):
        fmt = fmt[1:]
    if fmt.startswith("%"):
        return _sign(format(100 * value, fmt[1:] or ".0f")) + " %"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _sign(format(value, fmt))
    return format(str(value), fmt)


def _verdict(doc, path: str) -> str:
    """The rule table's sentence for the rows at `path` (module docstring); a row without its
    own `level` takes its family's, the nearest enclosing object's."""
    declared = path.split(".")[0] == "study"
    status = resolve(doc, "study.status") if declared else None
    family = resolve(doc, "study.rows") if declared else None
    rows = resolve(doc, path)
    rows = [rows] if isinstance(rows, dict) else rows
    if any("level" not in r for r in rows):
        parts = path.split(".")
        level = next(p["level"] for p in (resolve(doc, ".".join(parts[:i]))
                                          for i in range(len(parts) - 1, 0, -1))
                     if isinstance(p, dict) and "level" in p)
        rows = [{"level": level, **r} for r in rows]
    return verdicts.sentence(rows, status, family)


def render(template: Path, root: Path) -> str:
    """The page `template` renders to, its JSON sources read relative to `root`."""
    text = template.read_text()
    head = HEADER.match(text)
    if head is None:
        raise DocError(f"{template}: the first line must be <!-- docgen: NAME=PATH ... -->")
    sources = {}
    for item in head["sources"].split():
        name, rel = item.split("=", 1)
        sources[name] = (rel, json.loads((root / rel).read_text()))
    body = text[head.end():]

    def fill(m: re.Match) -> str:
        line = body.count("\n", 0, m.start()) + 2
        where = f"{template.name}:{line}: {{{{{m['source']}:{m['path']}}}}}"
        if m["source"] not in sources:
            raise DocError(f"{where}: source {m['source']!r} is not named in the docgen line")
        rel, doc = sources[m["source"]]
        try:
            if m["fmt"] == "verdict":
                return _verdict(doc, m["path"].strip())
            return render_value(resolve(doc, m["path"].strip()), m["fmt"])
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise DocError(f"{where}: not in {rel} ({e})") from None

    stamp = (f"<!-- generated by `make docs` from docs/templates/{template.name} and "
             f"{', '.join(rel for rel, _ in sources.values())}: edit the template -->\n")
    return stamp + PLACEHOLDER.sub(fill, body)


def render_all(templates: Path, out: Path, root: Path) -> dict[Path, str]:
    """{output path: text} for every template in `templates`."""
    return {out / t.name: render(t, root) for t in sorted(templates.glob("*.md"))}


def main(argv=None) -> int:
    root = Path.cwd()
    try:
        pages = render_all(root / "docs" / "templates", root / "docs", root)
    except DocError as e:
        print(f"make docs: {e}", file=sys.stderr)
        return 2
    for path, text in pages.items():
        path.write_text(text)
        print(f"wrote {path.relative_to(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
