"""Client side of the dashboard's tdos page: push a sweep's snapshot to the scheduler.

`TdosPage` registers `/tdos` on whatever scheduler the client talks to (LocalCluster,
dask-cuda, SLURM, a plain `dask scheduler`) when the sweep starts, pushes a fresh snapshot
every few seconds while it runs and a last one when it ends; the page stays as long as the
scheduler does. The scheduler-side code (`cluster.page`) travels by value, so the scheduler
needs only distributed and tornado.
"""
from __future__ import annotations

from typing import Callable

import cloudpickle

from cluster import page
from cluster.build import dashboard_link
from cluster.repeat import Repeating

MIN_PERIOD = 2.0            # seconds between pushes at most this often, whatever live_every says
IDLE_PERIOD = 10.0          # push period when the live plot is off (live_every 0): counts only

cloudpickle.register_pickle_by_value(page)


def page_link(client) -> str | None:
    """http://host:port/tdos beside the dashboard's /status, or None without a dashboard."""
    link = dashboard_link(client)
    if not link:
        return None
    base = link.rsplit("/", 1)[0] if link.rstrip("/").endswith("status") else link.rstrip("/")
    return f"{base}/tdos"


class TdosPage:
    """`snapshot(running)` -> dict with at least "store"; called in this process only."""

    def __init__(self, client, snapshot: Callable[[bool], dict], every: float):
        self.client, self.snapshot = client, snapshot
        self.every = max(MIN_PERIOD, every) if every > 0 else IDLE_PERIOD
        self.link: str | None = None
        self.error: str | None = None
        # pushes until the sweep ends, or until one fails (its error is the note)
        self._pushes = Repeating(lambda: self.every if self._push(running=True) else None,
                                 self.every, "tdos-page")

    @property
    def note(self) -> str:
        """What the dashboard line says about the page."""
        if self.link:
            return f"  (tdos page: {self.link})"
        return f"  (tdos page unavailable: {self.error})" if self.error else ""

    def __enter__(self):
        if page_link(self.client) is None:
            self.error = "the scheduler serves no dashboard"
            return self
        if self._push(running=True):
            self.link = page_link(self.client)
            self._pushes.start()
        return self

    def __exit__(self, *exc):
        self._pushes.stop()
        if self.link:
            self._push(running=False)          # the page stays, with the final counts
        return False

    def _push(self, running: bool) -> bool:
        try:
            self.client.run_on_scheduler(page.install, self.snapshot(running))
            return True
        except Exception as e:  # the page is a view: a failure must not stop the sweep
            self.error = f"{type(e).__name__}: {e}"
            return False
