"""What goes wrong during a sweep, said once: one console line per (model, layer, kind) with
its count, every traceback and Dask's own warnings in a log file beside the store.

`Failures.report(model, layer, kind, message, detail)` is the one door: a failed task, a
route that fell back, any per-model event that may repeat over many tasks. The console
gets `Failures.lines()` at the end of the sweep; `STORE.log` gets each report as it
happens, with `detail` (a traceback) below it. `DaskLogs` sends the `distributed` loggers
of this process (the scheduler and nannies of a cluster tdos started) and of every worker
(a worker plugin, so workers that join later are covered too) to the same file; with
`tdos sweep --verbose` they stay on the console.
"""
from __future__ import annotations

import collections
import contextlib
import logging
import time
import traceback

from distributed.diagnostics.plugin import WorkerPlugin

LOGGER = "distributed"                  # its children propagate to it; it does not propagate
PLUGIN = "tdos-logs"
_FORMAT = "%(asctime)s %(processName)s %(name)s %(levelname)s %(message)s"


def log_path(store: str) -> str:
    return str(store).rstrip("/") + ".log"


class Failures:
    """Counts per (model, layer, kind); the first message of each; the log file's path."""

    def __init__(self, log: str):
        self.log = log
        self.counts: collections.Counter = collections.Counter()
        self.first: dict[tuple, str] = {}

    def report(self, model: str, layer: str, kind: str, message: str, detail: str = "") -> None:
        """Record one event. `layer` names where ("layer 3", "residual stream"), `kind` what
        ("RuntimeError", "route"): events with equal (model, layer, kind) share one line."""
        key = (model, layer, kind)
        self.counts[key] += 1
        self.first.setdefault(key, message)
        with contextlib.suppress(OSError):         # an unwritable log must not stop the sweep
            with open(self.log, "a") as fh:
                fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {model} {layer}: {kind}: "
                         f"{message}\n" + (f"{detail.rstrip()}\n\n" if detail else ""))

    def exception(self, model: str, layer: str, e: BaseException) -> None:
        """Report a task's exception (its remote traceback in the log)."""
        self.report(model, layer, type(e).__name__, str(e).splitlines()[0] if str(e) else "",
                    "".join(traceback.format_exception(e)))

    def lines(self) -> list[str]:
        """One console line per (model, layer, kind), with the count."""
        return [f"{' '.join(key[:2])}: {key[2]}: {self.first[key]} ({n} task{'s' * (n > 1)}; "
                f"tracebacks in {self.log})" for key, n in self.counts.items()]


class DaskLogs:
    """While the sweep runs, Dask's log records go to `path` instead of the console, unless
    `verbose`: this process's from entering (a cluster's start and close included), the
    workers' inside `workers(client)`."""

    def __init__(self, path: str, verbose: bool = False):
        self.path, self.verbose = path, verbose
        self._saved = None

    def __enter__(self):
        if not self.verbose:
            self._saved = _to_file(self.path)
        return self

    def __exit__(self, *exc):
        if self._saved is not None:
            _restore(self._saved)
        return False

    @contextlib.contextmanager
    def workers(self, client):
        """Every worker of `client`'s cluster (those joining later too) logs to the file
        until the block ends: a worker plugin, removed again so that an existing cluster's
        workers log as before."""
        if self.verbose:
            yield
            return
        with contextlib.suppress(Exception):     # a worker that cannot load it logs as before
            client.register_plugin(LogsToFile(self.path), name=PLUGIN)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):  # the cluster may already be gone
                client.unregister_worker_plugin(PLUGIN)


class LogsToFile(WorkerPlugin):
    """Worker plugin: the worker's `distributed` records to `path` while it is registered."""

    name = PLUGIN

    def __init__(self, path: str):
        self.path = path
        self._saved = None

    def setup(self, worker=None):
        with contextlib.suppress(OSError):      # the store's directory unreachable from here
            self._saved = _to_file(self.path)

    def teardown(self, worker=None):
        if self._saved is not None:
            _restore(self._saved)


def _to_file(path: str):
    """Swap the `distributed` logger's handlers for one appending to `path`; what to restore."""
    log = logging.getLogger(LOGGER)
    handler = logging.FileHandler(path, delay=True)
    handler.setFormatter(logging.Formatter(_FORMAT))
    saved = (log.handlers[:], handler)
    log.handlers = [handler]
    return saved


def _restore(saved) -> None:
    handlers, mine = saved
    logging.getLogger(LOGGER).handlers = handlers
    mine.close()
