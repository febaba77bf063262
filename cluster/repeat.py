"""The one background thread of the client: a call repeated until it is told to stop, used by
the /tdos page's pushes (cluster/dashboard.py) and the sweep's live picture (sweep/run.py).

The thread is a daemon, so a crash of the client never waits on it; `stop()` wakes it at once
(an Event, not a sleep) and joins it, so what the caller does after `stop()` — a last push, a
last picture — never races a step still running.
"""
from __future__ import annotations

import threading
from typing import Callable


class Repeating:
    """`step()` on a daemon thread named `name`, first `first` seconds after `start()`, then
    each time after the seconds `step()` returned, until `stop()` or until `step()` returns
    None."""

    def __init__(self, step: Callable[[], float | None], first: float, name: str):
        self._step, self._first = step, first
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name=name)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> bool:
        """Stop and join it; whether it was still repeating (its caller's last step is due)."""
        self._stop.set()
        running = self._thread.is_alive()
        if running:
            self._thread.join()
        return running

    def _loop(self) -> None:
        wait = self._first
        while not self._stop.wait(wait):
            wait = self._step()
            if wait is None:
                return
