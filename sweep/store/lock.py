"""One sweep writes a store at a time.

Two `tdos sweep` runs of one config started together would both compute every block: the
values are exact either way, but the work is done twice and nothing says so. `store_lock`
takes an exclusive `flock` on `<store>.lock` for the whole run and writes who holds it (host,
pid, start time) into the file. A second run says who is writing and stops, or with `wait`
waits for it. The kernel releases the lock when its process ends however it ends (a crash,
SIGKILL, a lost node), so a lock left behind never blocks a resume: the file of a killed
sweep remains, its lock does not. A sweep that ends (cleanly, by an error or Ctrl-C) removes
the file while it still holds the lock; a sweep that was waiting on the removed file takes
the lock again on the path (`_acquire`).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from sweep.errors import StoreMismatch


def lock_path(store: str) -> Path:
    return Path(str(store).rstrip("/") + ".lock")


@contextlib.contextmanager
def store_lock(store: str, wait: bool = False):
    """Hold the store's lock for the block; StoreMismatch (one line) when another sweep holds it.
    The file is removed when the block ends (a killed process leaves it: nobody holds it)."""
    path = lock_path(store)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _acquire(path, store, wait)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                 "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode())
        yield
    finally:
        path.unlink(missing_ok=True)           # still held: a waiter sees it gone and retries
        os.close(fd)                           # closing releases the lock


def _acquire(path: Path, store: str, wait: bool) -> int:
    """A descriptor of `path` holding its flock. A lock taken on a file its holder removed on
    the way out (the path now names another file, or none) is let go and taken again."""
    said = False
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(path)
            if not wait:
                os.close(fd)
                raise StoreMismatch(f"store: another sweep ({holder}) is writing {store} — wait for "
                                    f"it to finish (tdos sweep --wait waits), or stop it") from None
            if not said:
                print(f"tdos: waiting for another sweep ({holder}) writing {store}", file=sys.stderr,
                      flush=True)
                said = True
            fcntl.flock(fd, fcntl.LOCK_EX)
        if _same_file(fd, path):
            return fd
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _holder(path: Path) -> str:
    try:
        h = json.loads(path.read_text() or "{}")
        return f"host {h['host']}, pid {h['pid']}, since {h['since']}"
    except (OSError, ValueError, KeyError):
        return "holder unknown"
