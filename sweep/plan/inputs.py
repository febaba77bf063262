"""What the models read: uniform random token ids, or natural text cut into token windows.

`inputs.text` is a file, a directory (every non-hidden file below it, in sorted order), a
glob, or `stdlib:pydoc_data.topics`: the English prose of Python's own reference manual
(what `help("if")` prints), which ships with every Python install and so needs no
download. The texts are joined with blank lines, tokenized once per tokenizer, and cut into
`sequences` consecutive windows of `length` tokens. Every failure (missing, empty, binary,
too short, ids the model cannot embed) is a one-line ConfigError naming the file.
"""
from __future__ import annotations

import glob
import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sweep.errors import ConfigError

DEFAULT_TEXT = "stdlib:pydoc_data.topics"
_MAX_TEXT_BYTES = 256 << 20       # read at most this much text (a corpus dir is a mistake)
_FILES_RECORDED = 50              # file names kept in the store's `inputs` record


@dataclass(frozen=True)
class TextSource:
    """The text a sweep reads, and where it came from."""

    spec: str                     # as resolved: an absolute file/dir/glob, or DEFAULT_TEXT
    files: tuple[str, ...]        # what was read, in order
    sha256: str                   # of the UTF-8 text given to the tokenizer
    text: str = field(repr=False, compare=False)

    def record(self) -> dict:
        """JSON-able: which text was used (for the store and the report)."""
        files = list(self.files[:_FILES_RECORDED])
        out = {"text": self.spec, "text_files": files, "text_file_count": len(self.files),
               "text_chars": len(self.text), "text_sha256": self.sha256}
        if self.spec == DEFAULT_TEXT:
            out["python"] = sys.version.split()[0]   # the manual's text follows the Python version
        return out


def read_text(spec: str, base_dir) -> TextSource:
    """`inputs.text` -> its text; relative paths and globs resolve from `base_dir`."""
    if spec.startswith("stdlib:"):
        return _stdlib_text(spec)
    pattern, files = _text_files(spec, Path(base_dir))
    parts, total = [], 0
    for f in files:
        total += _size(f)
        if total > _MAX_TEXT_BYTES:
            raise ConfigError(f"inputs.text: {spec} holds more than {_MAX_TEXT_BYTES >> 20} MiB of "
                              f"text — point at fewer files (a file or a narrower glob)")
        parts.append(_decode(f))
    text = "\n\n".join(parts)
    if not text.strip():
        raise ConfigError(f"inputs.text: {spec} is empty (only whitespace) — give a file with text")
    return TextSource(pattern, tuple(str(f) for f in files), _sha(text), text)


def _stdlib_text(spec: str) -> TextSource:
    if spec != DEFAULT_TEXT:
        raise ConfigError(f"inputs.text: {spec!r} is not a built-in text — use {DEFAULT_TEXT} "
                          f"or a file, directory or glob")
    try:
        from pydoc_data.topics import topics  # {topic: English prose}
    except ImportError:
        raise ConfigError(f"inputs.text: this Python install lacks pydoc_data ({DEFAULT_TEXT}) — "
                          f"give a text file instead") from None
    text = "\n\n".join(topics[k] for k in sorted(topics))
    return TextSource(DEFAULT_TEXT, (DEFAULT_TEXT,), _sha(text), text)


def _text_files(spec: str, base_dir: Path) -> tuple[str, list[Path]]:
    """(absolute spec, files in reading order) of a file, a directory or a glob."""
    path = Path(base_dir, spec).expanduser()
    try:
        if path.is_file():
            return str(path.resolve()), [path.resolve()]
        if path.is_dir():
            files = sorted(f for f in path.rglob("*") if f.is_file()
                           and not any(p.startswith(".") for p in f.relative_to(path).parts))
            if not files:
                raise ConfigError(f"inputs.text: directory {spec} holds no files — give a "
                                  f"directory of text files, a file or a glob")
            return str(path.resolve()), files
    except (OSError, ValueError) as e:
        raise ConfigError(f"inputs.text: cannot read {spec!r} ({getattr(e, 'strerror', None) or e}) — "
                          f"give a readable text file, directory or glob") from None
    if glob.has_magic(spec):
        files = sorted(Path(f) for f in glob.glob(str(path), recursive=True) if Path(f).is_file())
        if files:
            return str(path), files
        raise ConfigError(f"inputs.text: glob {spec} matches no files — fix the pattern "
                          f"(relative to the config file)")
    raise ConfigError(f"inputs.text: file not found: {spec} — give an existing text file, "
                      f"directory or glob, or {DEFAULT_TEXT}, or remove `text` for random tokens")


def _size(f: Path) -> int:
    try:
        return f.stat().st_size
    except OSError as e:
        raise ConfigError(f"inputs.text: cannot read {f} ({e.strerror}) — fix its permissions "
                          f"or leave it out") from None


def _decode(f: Path) -> str:
    try:
        data = f.read_bytes()
    except OSError as e:
        raise ConfigError(f"inputs.text: cannot read {f} ({e.strerror}) — fix its permissions "
                          f"or leave it out") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"inputs.text: {f} is not UTF-8 text (byte {data[e.start]:#04x} at offset "
                          f"{e.start}) — give plain-text files (a glob such as *.txt picks them)") from None
    if "\x00" in text:
        raise ConfigError(f"inputs.text: {f} is binary (NUL byte at offset {text.index(chr(0))}) — "
                          f"give plain-text files (a glob such as *.txt picks them)")
    return text


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------- tokens

def text_ids(source: TextSource, tokenizer, name: str, sequences: int, length: int,
             vocab_size: int, model: str) -> np.ndarray:
    """(S, L) int64: the first S * L token ids of the text, as S consecutive windows."""
    need = sequences * length
    ids = np.asarray(tokenizer(source.text, verbose=False)["input_ids"], dtype=np.int64)   # (n,)
    if ids.size < need:
        raise ConfigError(f"inputs.text: {source.spec} gives {ids.size} tokens with {name}'s "
                          f"tokenizer, need sequences*length = {need} — use a longer text or "
                          f"fewer tokens")
    ids = ids[:need]
    check_ids(ids, name, vocab_size, model)
    return ids.reshape(sequences, length)


def check_ids(ids: np.ndarray, name: str, vocab_size: int, model: str) -> None:
    """Every id in `ids` (any shape) is one `model` embeds: [0, vocab_size)."""
    if ids.min() < 0 or ids.max() >= vocab_size:
        raise ConfigError(f"inputs.tokenizer: {name} gives token id {int(ids.max())}, but {model} "
                          f"embeds ids 0..{vocab_size - 1} — use the tokenizer the model was "
                          f"trained with")


def random_ids(seed: int, sequences: int, length: int, vocab_size: int) -> np.ndarray:
    """(S, L) int64 uniform in [0, vocab_size), from numpy's default_rng(seed)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, vocab_size, size=(sequences, length), dtype=np.int64)
