"""The documents of `inputs.dataset`: one split of a Hugging Face dataset, opened without reading it.

A dataset is a hub id (`wikitext`, `owner/name`: streamed from the hub when it answers,
else read from the local `datasets` cache), a `save_to_disk` directory, or data files (a
path or glob of .jsonl/.json/.parquet/.csv/.txt) read by `datasets`' own packaged loaders.
Arrow already on disk (save_to_disk, the cache) is memory-mapped and shuffled by a seeded
permutation of its row indices; a stream (data files, the hub) is shuffled through a seeded
buffer of documents. Either way a sweep of 4 x 512 tokens reads a few thousand documents at
most, never a whole corpus. Every failure is a one-line ConfigError naming the field.
"""
from __future__ import annotations

import contextlib
import glob
import logging
import os
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sweep.checkpoints import hf
from sweep.checkpoints.reader import is_dir
from sweep.errors import ConfigError

# data-file extensions and the packaged `datasets` loader that reads each
LOADERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".txt": "text"}
SHUFFLE_BUFFER = 1000             # documents held by a stream's shuffle (IterableDataset's default)
_FILES_RECORDED = 50
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[\w.-]{1,96})?", re.ASCII)
_WHERE = "inputs.dataset"


@dataclass(frozen=True)
class Documents:
    """One split of a dataset, opened: where it is, what identifies its content, its rows."""

    spec: str                     # as resolved: an absolute directory, file or glob, or a hub id
    kind: str                     # "hub" (streamed) | "cache" | "disk" (save_to_disk) | "files"
    config: str | None            # the dataset's configuration (hub, cache)
    split: str
    column: str
    fingerprint: str              # datasets' `_fingerprint` of this split
    revision: str | None          # the hub commit (hub, cache)
    files: tuple[str, ...] = ()   # data files, in reading order
    rows: typing.Any = field(default=None, repr=False, compare=False)   # Dataset | IterableDataset

    @property
    def n_rows(self) -> int | None:
        """Rows of a memory-mapped split; None for a stream (its length is unknown until read)."""
        return len(self.rows) if self.kind in ("cache", "disk") else None

    def record(self) -> dict:
        """JSON-able: which documents the tokens come from (for the store and the report)."""
        out = {"dataset": self.spec, "dataset_kind": self.kind, "dataset_config": self.config,
               "split": self.split, "column": self.column, "dataset_fingerprint": self.fingerprint,
               "dataset_revision": self.revision, "dataset_rows": self.n_rows}
        if self.files:
            out.update(dataset_files=list(self.files[:_FILES_RECORDED]), dataset_file_count=len(self.files))
        return out

    def shuffled(self, seed: int | np.random.SeedSequence, min_chars: int):
        """(row index, text) of the documents with >= min_chars characters, in a seeded order.

        The index is the row's position in the split as stored, so `ds[index]` finds it again.
        """
        rng = np.random.default_rng(seed)
        rows = self.rows.select_columns([self.column])      # a copy: `fingerprint` is the split's
        if self.n_rows is not None:
            order = ((int(i), rows[int(i)][self.column]) for i in rng.permutation(self.n_rows))
        else:
            order = _buffer_shuffle(enumerate(self._stream(rows)), rng, SHUFFLE_BUFFER)
        with _quiet_datasets():
            for index, text in order:
                _check_text(text, index, self)
                if text is not None and len(text) >= min_chars:
                    yield index, text

    def _stream(self, rows):
        """Texts of the streamed split in stored order; a read error is a ConfigError."""
        rows = iter(rows)
        while True:
            with _reading(self.spec):
                row = next(rows, None)
            if row is None:
                return
            yield row[self.column]

    def shuffle_note(self, seed: int) -> str:
        if self.n_rows is not None:
            return f"seeded permutation of all {self.n_rows} rows (seed {seed})"
        return f"seeded buffer of {SHUFFLE_BUFFER} documents over the stream (seed {seed})"


def _buffer_shuffle(items, rng, size: int):
    """The stream shuffle of `datasets.IterableDataset.shuffle`, over (index, text) pairs so
    each document keeps its stored row index: hold `size` items, emit a random one per read."""
    held = []
    for item in items:
        if len(held) < size:
            held.append(item)
            continue
        j = int(rng.integers(size))
        yield held[j]
        held[j] = item
    for j in rng.permutation(len(held)):
        yield held[j]


def _check_text(value, index: int, docs: Documents) -> None:
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"inputs.column: column {docs.column!r} of {docs.spec} holds "
                          f"{type(value).__name__} values (row {index}: {str(value)[:40]!r}), not "
                          f"text — give a text column")


# ---------------------------------------------------------------- opening

def open_documents(spec: str, config: str | None, split: str | None, column: str,
                   base_dir) -> Documents:
    """`inputs.dataset` (+ dataset_config, split, column) -> its opened split; nothing read
    but the metadata and, for a stream, its first row (to check the column)."""
    path = Path(base_dir) / Path(spec).expanduser()          # `~/corpus` too; an absolute spec stays
    with _quiet_datasets():
        if is_dir(path):
            return _check_columns(_open_disk(spec, path, config, split, column))
        files = _data_files(spec, path)
        if files is not None:
            return _check_columns(_open_files(spec, path, files, config, split, column))
        if not _HUB_ID.fullmatch(spec) or spec.endswith(tuple(LOADERS)):
            raise ConfigError(f"{_WHERE}: no file, directory or glob matches {spec!r} and it is not "
                              f"a hub id — give a hub id (wikitext, owner/name), a save_to_disk "
                              f"directory, or data files ({', '.join(LOADERS)})")
        return _check_columns(_open_hub(spec, config, split, column))


def _data_files(spec: str, path: Path) -> list[Path] | None:
    """The data files `spec` names (a file or a glob), None when it names none on disk."""
    try:
        if path.is_file():
            return [path.resolve()]
    except (OSError, ValueError):
        return None
    if not glob.has_magic(spec):
        return None
    files = sorted(Path(f).resolve() for f in glob.glob(str(path), recursive=True) if Path(f).is_file())
    if not files:
        raise ConfigError(f"{_WHERE}: glob {spec} matches no files — fix the pattern (relative "
                          f"to the config file)")
    return files


def _loader(spec: str, files: list[Path]) -> str:
    kinds = {LOADERS.get(f.suffix.lower()) for f in files}
    if None in kinds:
        odd = next(f for f in files if f.suffix.lower() not in LOADERS)
        raise ConfigError(f"{_WHERE}: {odd.name} is not a data file datasets reads here — give "
                          f"{', '.join(LOADERS)} files (or inputs.text for plain text)")
    if len(kinds) > 1:
        raise ConfigError(f"{_WHERE}: {spec} mixes {' and '.join(sorted(kinds))} files — give "
                          f"files of one kind (a narrower glob)")
    return kinds.pop()


def _open_files(spec, path, files, config, split, column) -> Documents:
    """Data files, streamed by the packaged loader; a .txt file is one document."""
    import datasets

    _no_config(config, "data files")
    loader = _loader(spec, files)
    empty = next((f for f in files if f.stat().st_size == 0), None)
    if empty is not None:
        raise ConfigError(f"{_WHERE}: {empty} is empty — give data files with documents")
    extra = {"sample_by": "document"} if loader == "text" else {}
    _check_split(split or "train", ["train"], spec)       # a list of data files is split `train`
    with _reading(spec):
        builder = datasets.load_dataset_builder(loader, data_files=[str(f) for f in files], **extra)
        rows = builder.as_streaming_dataset(split="train")
    resolved = str(files[0]) if len(files) == 1 and not glob.has_magic(spec) else os.path.abspath(path)
    return Documents(resolved, "files", None, "train", column,
                     hf.builder_fingerprint(builder, "train"), None,
                     tuple(str(f) for f in files), rows)


def _open_disk(spec, path: Path, config, split, column) -> Documents:
    """A `save_to_disk` directory: one Dataset, or a DatasetDict of splits (memory-mapped)."""
    import datasets

    _no_config(config, "a save_to_disk directory")
    if not any((path / f).is_file() for f in ("state.json", "dataset_dict.json")):
        raise ConfigError(f"{_WHERE}: {spec} is a directory but not a datasets save_to_disk "
                          f"directory (no state.json or dataset_dict.json) — give data files "
                          f"(a path or glob such as {spec.rstrip('/')}/*.jsonl) or a save_to_disk directory")
    with _reading(spec):
        ds = datasets.load_from_disk(str(path))
    if isinstance(ds, datasets.DatasetDict):
        name = split or "train"
        _check_split(name, list(ds), spec)
        ds = ds[name]
    else:
        name = split or (str(ds.split) if ds.split is not None else "train")
        if ds.split is not None and name != str(ds.split):
            _check_split(name, [str(ds.split)], spec)
    return Documents(str(path.resolve()), "disk", None, name, column, hf.dataset_fingerprint(ds), None, (), ds)


def _open_hub(spec, config, split, column) -> Documents:
    """A hub id: streamed from the hub when it answers, else the split `datasets` cached."""
    import datasets

    from sweep.checkpoints.hub import hub_reachable

    name = split or "train"
    online = not datasets.config.HF_HUB_OFFLINE and hub_reachable()
    with _reading(spec, hub=True), _offline(not online):
        builder = datasets.load_dataset_builder(spec, config)
    splits = list(builder.info.splits or {})
    if splits:
        _check_split(name, splits, spec)
    with _reading(spec, hub=True), _offline(not online):      # offline: the cached arrow, memory-mapped
        rows = builder.as_streaming_dataset(split=name) if online else builder.as_dataset(split=name)
    return Documents(spec, "hub" if online else "cache", builder.config.name, name, column,
                     hf.builder_fingerprint(builder, name), builder.hash, (), rows)


def _no_config(config, what: str) -> None:
    if config is not None:
        raise ConfigError(f"inputs.dataset_config: only a hub dataset has configurations, "
                          f"inputs.dataset is {what} — remove dataset_config")


def _check_split(name: str, splits: list[str], spec: str) -> None:
    if name not in splits:
        raise ConfigError(f"inputs.split: {spec} has no split {name!r} (splits: "
                          f"{', '.join(sorted(splits))}) — use one of them")


def _check_columns(docs: Documents) -> Documents:
    """The column exists and holds text: from the features when known, else from row 0."""
    import datasets

    features = docs.rows.features
    if features is None:                     # csv and json arrays stream without a schema
        with _reading(docs.spec):
            first = next(iter(docs.rows), None)
        if first is None:
            raise ConfigError(f"{_WHERE}: {docs.spec} (split {docs.split}) has no rows — give a "
                              f"dataset with documents")
        _check_column_name(docs, first)
        _check_text(first[docs.column], 0, docs)
        return docs
    _check_column_name(docs, features)
    feat = features[docs.column]
    kind = feat.dtype if isinstance(feat, datasets.Value) else type(feat).__name__
    if kind not in ("string", "large_string", "Json"):      # Json: mixed values, checked per row
        raise ConfigError(f"inputs.column: column {docs.column!r} of {docs.spec} holds {kind} "
                          f"values, not text — give a text column")
    return docs


def _check_column_name(docs: Documents, columns) -> None:
    if docs.column not in columns:
        raise ConfigError(f"inputs.column: {docs.spec} has no column {docs.column!r} (columns: "
                          f"{', '.join(columns)}) — set inputs.column to its text column")


# ---------------------------------------------------------------- the library's settings

@contextlib.contextmanager
def _reading(spec: str, hub: bool = False):
    """Whatever `datasets` or pyarrow raise on the user's data becomes one line."""
    try:
        yield
    except ConfigError:
        raise
    except ConnectionError as e:
        if not hub:
            raise ConfigError(f"{_WHERE}: cannot read {spec} ({_two_lines(e)}) — check the path") from None
        raise ConfigError(f"{_WHERE}: {spec} is not in the local datasets cache and the hub is "
                          f"unreachable from here — load it once where the hub answers "
                          f"(datasets.load_dataset), or give data files or a save_to_disk "
                          f"directory") from None
    except Exception as e:  # noqa: BLE001 — malformed files, unknown configs, 404s: say which, in one line
        raise ConfigError(f"{_field_named(e) if hub else _WHERE}: cannot read {spec} "
                          f"({type(e).__name__}: {_two_lines(e)}) — fix the data or the field") from None


def _field_named(e: Exception) -> str:
    """The field a hub error is about: datasets names a bad split or config in its message."""
    text = str(e).lower()
    return "inputs.split" if "split" in text else "inputs.dataset_config" if "config" in text else _WHERE


def _two_lines(e: BaseException) -> str:
    """A datasets error's first two lines (its second often names the file or the split)."""
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return " / ".join(lines[:2])[:200] or type(e).__name__


@contextlib.contextmanager
def _offline(offline: bool):
    """datasets' offline mode (HF_HUB_OFFLINE) for this call only: with no hub to answer,
    datasets would retry it five times (~25 s) before falling back to its cache."""
    import datasets

    before = datasets.config.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = before or offline
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE = before


@contextlib.contextmanager
def _quiet_datasets():
    """No progress bars or cache notices from datasets: tdos prints one line per failure."""
    import datasets

    level, bars = datasets.logging.get_verbosity(), not datasets.utils.are_progress_bars_disabled()
    datasets.logging.set_verbosity(logging.CRITICAL)
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.logging.set_verbosity(level)
        if bars:
            datasets.enable_progress_bars()
