"""Checks every config section shares: YAML value types, strings a path or name may hold,
unknown keys, and the store path (refused before anything is created). Each failure is a
one-line ConfigError, `<field>: <what> — <fix>`.

`where`, here and in every check of the config, the plan and the cluster's section, is that
`<field>`: the dotted config key an error names ("models[1].nulls", "cluster.slurm"), and
nothing else. (A task names the part of a model it computes, for the failures counted under
it, `part`: sweep/tasks.py.)"""
from __future__ import annotations

import difflib
import json
import os
import typing
import unicodedata
from pathlib import Path

from sweep.checkpoints.reader import is_dir  # noqa: F401  (config's paths read as the checkpoints' are)
from sweep.errors import ConfigError, StoreMismatch


def check_type(value, hint, where: str):
    if hint is typing.Any:
        return value
    allowed = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, _UnionType) else (hint,)
    if value is None and type(None) in allowed:
        return None
    for typ in allowed:
        if typ is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if typ is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if typ is str and isinstance(value, str):
            return clean_str(value, where)
        if typ is bool and isinstance(value, bool):
            return value
        if typ in (tuple, list) and isinstance(value, list):     # its items: the section's check
            return value
        if typ is dict and isinstance(value, dict):
            return value
    names = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in allowed)
    raise ConfigError(f"{where}: expected {names}, got {value!r} ({type(value).__name__}) — "
                      f"fix the value (docs/config.md lists every field)")


def clean_str(value: str, where: str) -> str:
    """Refuse control characters and lone surrogates: no path or name holds them, and they
    would break the one-line error and the store's JSON attributes."""
    for i, ch in enumerate(value):
        if unicodedata.category(ch) in ("Cc", "Cs"):
            raise ConfigError(f"{where}: {value!r} holds the control character {ch!r} at {i} — "
                              f"remove it")
    return value


_UnionType = type(int | None)
_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true/false",
               type(None): "null", tuple: "a list", list: "a list", dict: "a mapping"}


def check_store(store) -> str:
    """The store path, absolute; refused here (before anything is created) when it is a
    file, under a file, not writable, or a damaged store."""
    if not isinstance(store, str) or not store:
        raise ConfigError(f"store: expected a path like out/run.zarr, got {store!r}")
    clean_str(store, "store")
    try:
        p = Path(store).expanduser().resolve()
        if p.exists() and not p.is_dir():
            raise ConfigError(f"store: {store} exists and is a file — give a directory path like out/run.zarr")
        probe = p
        while not probe.exists():
            probe = probe.parent
        writable = probe.is_dir() and os.access(probe, os.W_OK | os.X_OK)
        meta = p / "zarr.json"
        damaged = meta.is_file() and not _is_zarr_group(meta)
    except OSError as e:
        raise ConfigError(f"store: {store!r} cannot be used as a path ({e.strerror or e}) — "
                          f"choose a shorter, plain path") from None
    if not writable:
        raise ConfigError(f"store: {store} is not writable ({probe} is not a writable directory) — "
                          f"choose a path in a writable directory")
    if damaged:
        raise ConfigError(f"store: {meta} is not a zarr v3 group's metadata (a damaged store, or "
                          f"another tool's directory) — remove {store} or choose another path")
    return str(p)


def existing_store(store) -> Path:
    """The path of an existing store, for commands that read or change one (status, upgrade):
    refused in one line that says what is there instead: nothing, a file, a directory that
    is no zarr group, a damaged one, or another tool's zarr group."""
    p, fix = Path(store), "give the path of a sweep's store"
    meta = p / "zarr.json"
    if not p.exists():
        raise StoreMismatch(f"store: {store} not found — {fix}")
    if not p.is_dir():
        raise StoreMismatch(f"store: {store} is a file, not a store (a store is a directory) — {fix}")
    if not meta.is_file():
        raise StoreMismatch(f"store: {store} is a directory but not a tdos store (it holds no "
                            f"zarr.json) — {fix}")
    if not _is_zarr_group(meta):
        raise StoreMismatch(f"store: {meta} is not a zarr v3 group's metadata (a damaged store, or "
                            f"another tool's directory) — {fix}")
    if "tdos_format" not in (json.loads(meta.read_text()).get("attributes") or {}):
        raise StoreMismatch(f"store: {store} is a zarr group but not a tdos store (no tdos_format "
                            f"attribute) — {fix}")
    return p


def _is_zarr_group(f: Path) -> bool:
    try:
        meta = json.loads(f.read_text())
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(meta, dict) and meta.get("zarr_format") == 3 and meta.get("node_type") == "group"


def reject_unknown(raw: dict, known, where: str) -> None:
    for key in raw:
        if key not in known:
            close = difflib.get_close_matches(str(key), list(known), n=1)
            hint = f" — did you mean {close[0]!r}?" if close else ""
            prefix = f"{where}." if where else ""
            raise ConfigError(f"{prefix}{key}: unknown field{hint} (known: {', '.join(known)})")


def set_dotted(raw: dict, key: str, value) -> None:
    *parents, last = key.split(".")
    node = raw
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value


def is_file(p: Path) -> bool:
    return _asks(p.is_file)


def _asks(question) -> bool:
    try:
        return question()
    except (OSError, ValueError):     # a NUL byte or a name too long is simply not there
        return False
