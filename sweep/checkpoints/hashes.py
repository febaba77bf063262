"""The sha256 of a checkpoint's files, read once per state of each file (docs/store.md).

A checkpoint's identity (sweep/plan/provenance.py records it) is the sha256 of every file that decides its
values. Reading every byte on every plan, dry run and resume cost minutes at 70B; a file's
sha256 now comes from, in order:

1. **The Hugging Face cache's content address.** huggingface_hub keeps a downloaded file as
   `models--org--name/blobs/<etag>` and links `snapshots/<rev>/<file>` to it. An LFS file's
   etag is the sha256 of its content (64 hex digits); a small git file's is its git sha1 (40
   digits), so those are read. A blob is written as `<etag>.incomplete` and renamed once
   complete, never rewritten in place: a path that resolves to `.../blobs/<64 hex>` is taken
   to hold the content its name says.
2. **The hash cache**, `sha256.json` in `$TDOS_CACHE` (default `$XDG_CACHE_HOME/tdos`, else
   `~/.cache/tdos`): the sha256 read when the file at that path had this size, mtime_ns,
   ctime_ns and inode. Every write to a file, and every `touch`/`os.utime` that puts its mtime
   back, sets its ctime to the present, which no user call can set back; a copy or a
   replacement is another inode. An entry counts only if its hashing began at least 2 s
   after the file's ctime: a write in the same clock tick as the read would leave the ctime
   as it was (git's "racily clean" entries).
3. **Reading the file**, behind one progress bar in bytes (rate and ETA) for all the files
   that need it; the bar shows only on a terminal.

The cache is rewritten whole (a temporary file, then `os.replace`), so a reader never sees
half a file; two writers at once may drop each other's new entries, which costs a rehash,
never a wrong hash. An unreadable or damaged cache counts as empty and is rewritten.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

CACHE_FILE = "sha256.json"
_VERSION = 1
_CHUNK = 1 << 22                       # bytes read at a time when hashing
_RACY_NS = 2_000_000_000               # an entry hashed within 2 s of the file's ctime is re-read
_SAVE_EVERY_S = 10                     # seconds between writes of the cache while files are read
_MAX_ENTRIES = 10_000                  # the newest kept: a few hundred checkpoints' files
_STAT = ("size", "mtime_ns", "ctime_ns", "inode")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_HUB_REPOS = ("models--", "datasets--", "spaces--")


@dataclass(frozen=True)
class Hashed:
    """One file's sha256 and the state it was taken in."""

    path: Path
    size: int
    mtime_ns: int
    sha256: str
    source: str        # "hub blob" (its name), "cache" (sha256.json) or "read"


def cache_dir() -> Path:
    """Where tdos keeps its caches: $TDOS_CACHE, else $XDG_CACHE_HOME/tdos, else ~/.cache/tdos."""
    if os.environ.get("TDOS_CACHE"):
        return Path(os.environ["TDOS_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "tdos"


def hub_blob_sha256(path) -> str | None:
    """The sha256 a Hugging Face cache blob is named by, when `path` resolves to one."""
    real = Path(os.path.realpath(path))
    if (real.parent.name == "blobs" and real.parent.parent.name.startswith(_HUB_REPOS)
            and _SHA256.fullmatch(real.name)):
        return real.name
    return None


def sha256_files(paths, progress: bool | None = None) -> list[Hashed]:
    """The sha256 of each file, in order: hub blob name, cache, or read (then cached).

    progress: None shows the bar when stderr is a terminal; workers pass False."""
    paths = [Path(p) for p in paths]
    cache = HashCache()
    found, todo = {}, []
    for p in paths:
        s = os.stat(p)
        name = hub_blob_sha256(p)
        sha = name or cache.get(p, s)
        if sha:
            found[p] = Hashed(p, s.st_size, s.st_mtime_ns, sha, "hub blob" if name else "cache")
        elif p not in todo:
            todo.append(p)
    if todo:
        from tqdm import tqdm

        total = sum(os.stat(p).st_size for p in todo)
        with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr,
                  desc=f"sha256 of {len(todo)} file(s)", smoothing=0.1,
                  disable=None if progress is None else not progress) as bar:
            saved = time.monotonic()
            for p in todo:
                found[p] = _read(p, cache, bar)
                if time.monotonic() - saved > _SAVE_EVERY_S:      # an interrupted run keeps them
                    cache.save()
                    saved = time.monotonic()
        cache.save()
    return [found[p] for p in paths]


def _read(path: Path, cache: HashCache, bar) -> Hashed:
    """Hash `path` and cache the result unless the file changed while it was read."""
    started = time.time_ns()
    before = os.stat(path)
    h, buf = hashlib.sha256(), bytearray(_CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buf):
            h.update(view[:n])
            bar.update(n)
    sha = h.hexdigest()
    if _key(os.stat(path)) == _key(before):
        cache.put(path, before, sha, started)
    return Hashed(path, before.st_size, before.st_mtime_ns, sha, "read")


class HashCache:
    """sha256.json in cache_dir(): {"version", "files": {absolute path: {size, mtime_ns,
    ctime_ns, inode, sha256, hashed_ns}}}, read once, merged and replaced by save()."""

    def __init__(self, directory=None):
        self.file = Path(directory or cache_dir()) / CACHE_FILE
        self.entries = _load(self.file)
        self.added: dict[str, dict] = {}

    def get(self, path, s: os.stat_result) -> str | None:
        e = self.entries.get(os.path.abspath(path))
        if e is None or tuple(e[k] for k in _STAT) != _key(s):
            return None
        if e["hashed_ns"] < s.st_ctime_ns + _RACY_NS:      # a write in the same tick goes unseen
            return None
        return e["sha256"]

    def put(self, path, s: os.stat_result, sha256: str, hashed_ns: int) -> None:
        entry = {**dict(zip(_STAT, _key(s))), "sha256": sha256, "hashed_ns": hashed_ns}
        self.added[os.path.abspath(path)] = self.entries[os.path.abspath(path)] = entry

    def save(self) -> None:
        """Merge the new entries into the file as it is now, drop those whose file changed or
        went, and replace it atomically. A cache that cannot be written is said once."""
        if not self.added:
            return
        merged = {**_load(self.file), **self.added}
        kept = sorted(((p, e) for p, e in merged.items() if _current(p, e)),
                      key=lambda pe: pe[1]["hashed_ns"])[-_MAX_ENTRIES:]
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.file.parent, prefix=".sha256-", suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as fh:
                    json.dump({"version": _VERSION, "files": dict(kept)}, fh)
                os.replace(tmp, self.file)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        except OSError as e:
            warnings.warn(f"tdos: hash cache {self.file} not written ({e.strerror}); files will "
                          f"be hashed again — set TDOS_CACHE to a writable directory", stacklevel=2)
        self.added.clear()


def _key(s: os.stat_result) -> tuple[int, int, int, int]:
    return (s.st_size, s.st_mtime_ns, s.st_ctime_ns, s.st_ino)


def _current(path: str, entry: dict) -> bool:
    """Whether the file at `path` is still in the entry's state (else it can never match)."""
    try:
        return _key(os.stat(path)) == tuple(entry[k] for k in _STAT)
    except OSError:
        return False


def _load(file: Path) -> dict[str, dict]:
    """The valid entries of the cache file; {} when it is missing, unreadable or damaged."""
    try:
        raw = json.loads(file.read_text())
    except (OSError, ValueError):
        return {}
    files = raw.get("files") if isinstance(raw, dict) and raw.get("version") == _VERSION else None
    if not isinstance(files, dict):
        return {}
    return {p: e for p, e in files.items() if _valid(e)}


def _valid(e) -> bool:
    return (isinstance(e, dict)
            and all(type(e.get(k)) is int for k in (*_STAT, "hashed_ns"))
            and isinstance(e.get("sha256"), str) and _SHA256.fullmatch(e["sha256"]) is not None)
