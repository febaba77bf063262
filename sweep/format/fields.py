"""One declaration per config section: each field of a section's dataclass says, in the
dataclass field's own metadata, its one line of help, its check, what the docs call its type
and where to read more. Everything else is generated from that one place: the YAML fields
the loader accepts (sweep/config/load.py), the flags of `tdos analyze` and `tdos compare`
(analysis/cli.py), and docs/config.md's tables of fields (sweep/config/docs.py, held to the
page by tests/test_config_docs.py).

    @dataclass(frozen=True)
    class ComputeConfig:
        token_block: int = option(32, "tokens per task, one chunk of the eigenvalue array",
                                  check=at_least(1, fix="use e.g. token_block: 32"))

A field made with plain `dataclasses.field` (a loader's bookkeeping, such as the config key
a model came from) is no YAML field. Checks here are those of one value; checks between
fields stay with their section. Imports nothing but the standard library: the store format's
own sections (sweep/format/settings.py, sweep/format/study.py) are declared with it.
"""
from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import MISSING, dataclass
from typing import Any, Callable

__all__ = ["Check", "FieldError", "option", "declared", "yaml_names", "first_problem",
           "at_least", "one_of", "finite_at_least", "nonempty", "type_words", "default_words",
           "flag", "plain_help"]


class FieldError(ValueError):
    """A declared field's value is wrong; one line, `<section>.<field>: <what> — <fix>`."""


@dataclass(frozen=True)
class Check:
    """What one value must be. `ok(value)` decides (an exception counts as not ok); the
    problem is said as `what` (a format string of the value `v`) and the fix; `says` is the
    condition as docs/config.md's type column writes it: after the type's words when it
    starts with a sign or a digit (">= 1"), instead of them when with a word or a backtick."""
    ok: Callable[[Any], bool]
    what: str
    fix: str
    says: str = ""
    choices: tuple = ()          # the allowed values, where they are a list (a flag shows them)

    def problem(self, value) -> str | None:
        """`<what> — <fix>` when `value` fails, else None. None values are never checked:
        null is "not given", and whether a field may be null is its type's to say."""
        if value is None:
            return None
        try:
            good = bool(self.ok(value))
        except (TypeError, ValueError):
            good = False
        shown = list(value) if isinstance(value, tuple) else value     # as YAML writes it
        return None if good else f"{self.what.format(v=shown)} — {self.fix}"


def option(default=MISSING, help: str = "", *, check: Check | None = None, kind: str = "",
           default_text: str | None = None, see: str | None = None, factory=MISSING,
           section=None, names: tuple[str, ...] | None = None, flag: dict | None = None):
    """A declared config field. `help`: one line, what it means (markdown; the CLI drops the
    backticks). `check`: its one-value check. `kind`: the docs' type words when the
    annotation's are not enough ("two rates 0 < lo < hi"). `default_text`: the docs' words for
    the default ("default the paper's window", "required"). `see`: a docs page (and #anchor;
    a bare #anchor is one of docs/config.md's own) that says more. `section`: the dataclass of
    a nested section. `names`: the YAML names it is given by, when not its own (`models` is
    also `model`). `flag`: argparse keywords for a command-line flag of it (nargs, type,
    metavar), where its annotation does not say them."""
    meta = {"help": help, "check": check, "kind": kind, "default_text": default_text,
            "see": see, "section": section, "names": names, "flag": flag}
    return dataclasses.field(default=default, default_factory=factory, metadata=meta)


def declared(cls) -> list[dataclasses.Field]:
    """The declared fields of section `cls`, in order."""
    return [f for f in dataclasses.fields(cls) if "help" in f.metadata]


def yaml_names(cls) -> tuple[str, ...]:
    """The YAML field names section `cls` accepts, in declaration order."""
    return tuple(n for f in declared(cls) for n in (f.metadata["names"] or (f.name,)))


def first_problem(obj, prefix: str) -> str | None:
    """`<prefix>.<field>: <what> — <fix>` of the first declared field of `obj` whose value
    fails its check, else None."""
    for f in declared(type(obj)):
        check = f.metadata["check"]
        problem = check.problem(getattr(obj, f.name)) if check else None
        if problem:
            return f"{prefix}.{f.name}: {problem}" if prefix else f"{f.name}: {problem}"
    return None


# ---------------------------------------------------------------- checks

def at_least(n, fix: str, what: str | None = None, integer: bool = False) -> Check:
    """>= n; with `integer`, also an integer (YAML's were typed at load; Python callers' not)."""
    if integer:
        return Check(lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= n,
                     what or f"must be an integer >= {n}, got {{v!r}}", fix, f">= {n}")
    return Check(lambda v: v >= n, what or f"must be >= {n}, got {{v}}", fix, f">= {n}")


def one_of(choices, fix: str, what: str | None = None) -> Check:
    choices = tuple(choices)
    return Check(lambda v: v in choices, what or f"{{v!r}} is not one of {', '.join(choices)}",
                 fix, " \\| ".join(f"`{c}`" for c in choices), choices)


def finite_at_least(n, unit: str, fix: str, strict: bool = False) -> Check:
    """A finite number >= n (> n when `strict`) of `unit`."""
    op = ">" if strict else ">="
    ok = (lambda v: math.isfinite(v) and v > n) if strict else (lambda v: math.isfinite(v) and v >= n)
    return Check(ok, f"must be a finite number of {unit} {op} {n:g}, got {{v}}", fix,
                 f"{unit} {op} {n:g}")


def nonempty(fix: str = "give a value or remove the field") -> Check:
    return Check(lambda v: v != "", "empty string", fix)


# ---------------------------------------------------------------- words for the docs

_WORDS = {int: "integer", float: "number", str: "string", bool: "boolean", tuple: "list",
          list: "list", dict: "mapping"}


def type_words(cls, f: dataclasses.Field) -> str:
    """docs/config.md's "type, default" of field `f` of `cls`: its kind (declared, or its
    annotation's words and its check's condition), then its default."""
    kind = f.metadata["kind"]
    if not kind:
        hint = typing.get_type_hints(cls)[f.name]
        union = type(hint) is type(int | None) or typing.get_origin(hint) is typing.Union
        args = typing.get_args(hint) if union else (hint,)
        kind = " or ".join(_WORDS.get(a, getattr(a, "__name__", str(a))) for a in args
                           if a is not type(None))
        check = f.metadata["check"]
        if check is not None and check.says:     # a condition (">= 1") follows the type's words;
            says = check.says                    # words of its own (a list of values) replace them
            kind = says if says[0].isalpha() or says[0] == "`" else f"{kind} {says}"
    return f"{kind}, {default_words(f)}"


def flag(cls, f: dataclasses.Field) -> tuple[str, dict]:
    """The command-line flag of field `f` of section `cls`: its option string and argparse
    keywords. The type comes from the annotation unless declared; a list of allowed values is
    shown as the metavar, not given as argparse's choices: a bad value gets the section's own
    check, the line a config would get."""
    kwargs = dict(f.metadata["flag"] or {})
    if "type" not in kwargs:
        hint = typing.get_type_hints(cls)[f.name]
        kwargs["type"] = next(a for a in (typing.get_args(hint) or (hint,)) if a is not type(None))
    check = f.metadata["check"]
    if "metavar" not in kwargs:
        kwargs["metavar"] = ("{" + ",".join(check.choices) + "}" if check and check.choices
                             else f.name.upper())
    return f"--{f.name.replace('_', '-')}", kwargs


def plain_help(f: dataclasses.Field) -> str:
    """The field's help as a terminal shows it: no markdown backticks, its docs page named."""
    see = f.metadata["see"]
    page = f" (docs/{see.split('#')[0] or 'config.md'})" if see else ""
    return f.metadata["help"].replace("`", "").replace("\\|", "|") + page


def default_words(f: dataclasses.Field) -> str:
    """The default as the docs say it: "required", "default 32", "default null", or the
    declared words."""
    if f.metadata["default_text"] is not None:
        return f.metadata["default_text"]
    if f.default is MISSING and f.default_factory is MISSING:
        return "required"
    value = f.default if f.default is not MISSING else f.default_factory()
    if value is None:
        return "default null"
    if isinstance(value, bool):
        return f"default {str(value).lower()}"
    if isinstance(value, str):
        return f"default `{value}`"
    if isinstance(value, (tuple, list)):
        return f"default [{', '.join(f'{v:g}' if isinstance(v, float) else str(v) for v in value)}]"
    return f"default {value:g}" if isinstance(value, float) else f"default {value}"
