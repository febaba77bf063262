"""One sweep writes a store at a time.

Two `tdos sweep` runs of one config started together would both compute every block: the
values are exact either way, but the work is done twice and nothing says so. `store_lock`
takes an exclusive `flock` on `<store>.lock` for the whole run and writes who holds it (host,
pid, start time) into the file. A second run says who is writing and stops, or with `wait`
waits for it. The kernel releases the lock when its process ends however it ends (a crash,
SIGKILL, a lost node), so a lock left behind never blocks a resume: the file may remain,
the lock does not.
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
    """Hold the store's lock for the block; StoreMismatch (one line) when another sweep holds it."""
    path = lock_path(store)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(path)
            if not wait:
                raise StoreMismatch(f"store: another sweep ({holder}) is writing {store} — wait for "
                                    f"it to finish (tdos sweep --wait waits), or stop it") from None
            print(f"tdos: waiting for another sweep ({holder}) writing {store}", file=sys.stderr,
                  flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                 "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode())
        yield
    finally:
        os.close(fd)                           # closing releases the lock


def _holder(path: Path) -> str:
    try:
        h = json.loads(path.read_text() or "{}")
        return f"host {h['host']}, pid {h['pid']}, since {h['since']}"
    except (OSError, ValueError, KeyError):
        return "holder unknown"
