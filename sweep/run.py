"""The client side of a sweep: store, plan, cluster, submit, progress, live plot, verdict.

Re-running on the same config (with or without --resume) plans only the ledger cells
still at 0, so an interrupted or partly failed sweep is finished by running it again.
"""
from __future__ import annotations

import collections
import contextlib
import sys
import time
from dataclasses import dataclass, field

from tqdm import tqdm

from cluster.repeat import Repeating
from sweep.config.load import with_store
from sweep.config.sections import SweepConfig
from sweep.errors import (CheckpointChanged, ConfigError, NonCausal, RouteFailed, SelfCheckFailed,
                          UnsupportedTransformers)
from sweep.failures import DaskLogs, Failures, log_path
from sweep.format.variants import NOUNS, ROLES
from sweep.plan.make import Plan, make_plan
from sweep.store import ledger
from sweep.store import writer as st
from sweep.store.lock import store_lock
from sweep.store.study import record_study
from sweep.tasks import BlockTask, DepthTask, MemoryTask, ResidualTask, pending_tasks
from sweep.watch import Stalled, StallWatch
from sweep.worker.plugin import WorkerStatePlugin
from sweep.worker.task import run_task

RETRIES = 2          # task exceptions; a killed worker's tasks are rescheduled by the scheduler
POLL_S = 0.1         # the loop's sleep while no task has finished
WATCH_S = 1.0        # seconds between two looks at the workers (sweep/watch.py)
LIVE_SHARE = 0.1     # of one core, what the live TDOS render takes at most (its pauses grow)
FATAL = (CheckpointChanged, NonCausal, RouteFailed, SelfCheckFailed, UnsupportedTransformers)  # every later
                                                                               # task would repeat


@dataclass
class SweepResult:
    exit_code: int                 # 0 only when every planned block is in the ledger
    planned: int                   # block tasks submitted by this run
    total: int                     # planned blocks of the whole sweep
    done: int                      # blocks in the ledger at the end (flagged included)
    flagged: int                   # of which non-finite
    results: list[dict] = field(default_factory=list)    # one per completed task
    errors: list[str] = field(default_factory=list)
    interrupted: bool = False
    stalled: str | None = None     # the line that stopped a sweep no block of which could progress


def run_sweep(cfg: SweepConfig | Plan, store: str | None = None, workers: int | None = None,
              scheduler: str | None = None, resume: bool = False, *, client=None,
              progress: bool = True, wait: bool = False, verbose: bool = False,
              again: str | None = None) -> SweepResult:
    """Run (or finish) the sweep `cfg` describes (a config, or its plan from make_plan);
    `client` reuses an existing dask Client. While it runs the store is locked: a second
    sweep of the same store stops at once (or, with `wait`, waits for this one). Tracebacks
    and (unless `verbose`) Dask's own warnings go to STORE.log; `again` is the command that
    resumes the sweep, for the line a stopped sweep ends with."""
    plan = cfg if isinstance(cfg, Plan) else make_plan(cfg)
    if store is not None:
        plan = Plan(with_store(plan.config, store), plan.models)
    cfg = plan.config
    with store_lock(cfg.store, wait=wait):
        root = st.open_store(plan, create=not resume, say=_say)
        if (said := record_study(root, cfg.study)) is not None:    # before any block is computed
            _say(said)
        tasks = pending_tasks(plan, root)
        names = [m.name for m in plan.models]
        within = {m.name: (m.layers, m.tokens.shape[0]) for m in plan.models}   # a shrunk config's part
        before = ledger.counts(root, names, within)
        run = _Run(Failures(log_path(cfg.store)), again or "rerun with --resume", time.monotonic())
        if tasks:
            for m in plan.models:
                if m.variant is not None:        # swept the way its model is: said on its line
                    continue
                own = [x.variant.role for x in plan.models if x.variant and x.variant.of == m.name]
                _say(f"{m.name}: " + (f"whole model on every worker: {m.info.not_local}" if m.info.not_local
                                      else f"layer-local (at most {cfg.compute.resident_layers} "
                                           f"decoder layer(s) per worker, the residual stream in the store)")
                     + "".join(f"; its {own.count(r)} {NOUNS[r]}(s) the same way"
                               for r in ROLES if r in own))
            _say(f"log: {run.failures.log} (tracebacks{'' if verbose else ', Dask warnings'})")
            with DaskLogs(run.failures.log, verbose) as logs, \
                    _connect(cfg, workers, scheduler, client) as c, _tdos_page(c, cfg) as page:
                _say(f"dashboard: {_dashboard(c)}{page.note}")
                with logs.workers(c), _LivePlot(cfg.store, cfg.compute.live_every):
                    try:
                        _execute(c, cfg, tasks, before, progress, run)
                    except KeyboardInterrupt:
                        run.interrupted = True
                    except Stalled as e:
                        run.stalled = str(e)
        return _verdict(cfg, root, within, tasks, run)


@dataclass
class _Run:
    """What one run of the loop gathers for the verdict."""
    failures: Failures
    again: str                                  # how to resume, for the closing line
    started: float                              # time.monotonic() when the run began
    results: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    interrupted: bool = False
    stalled: str | None = None                  # the line that stopped the sweep


@contextlib.contextmanager
def _connect(cfg, workers, scheduler, client):
    """A client to the sweep's cluster. The cluster's own ConfigError (a bad --scheduler
    address, kind cuda without dask-cuda) becomes sweep's, the one `tdos` reports as a line."""
    if client is not None:
        yield client
        return
    from cluster.build import connect
    from cluster.config import ConfigError as ClusterConfigError

    try:
        with connect(cfg.cluster, workers, scheduler) as c:
            yield c
    except ClusterConfigError as e:
        raise ConfigError(str(e)) from None


def _tdos_page(client, cfg):
    """The dashboard's /tdos page (cluster/page.py): registered now, updated until the end."""
    from analysis.views.live import live_snapshot
    from cluster.dashboard import TdosPage

    return TdosPage(client, lambda running: live_snapshot(cfg.store, running), cfg.compute.live_every)


def _dashboard(client) -> str:
    from cluster.build import dashboard_link

    return dashboard_link(client) or "(none)"


def _execute(client, cfg, tasks, before, progress, run: _Run) -> None:
    futures = _submit(client, cfg, tasks)
    # futures neither finished nor released: the only ones a cancel may name (docs/clusters.md:
    # cancelling a released key that a pending task still depends on trips the scheduler's
    # `assert ts.who_wants`)
    pending = set(futures)
    keys = {f.key: t for f, t in futures.items()}
    watch = StallWatch(client, cfg.compute.stall_after,
                       lambda k: keys[k].describe() if k in keys else str(k), _say)
    bar = tqdm(total=before.total, initial=before.done, unit="block", desc="blocks",
               disable=not progress, file=sys.stderr, smoothing=0.1)
    from distributed import as_completed

    fell_back, ready, idle_since = set(), as_completed(list(futures)), time.monotonic()
    try:
        while not ready.is_empty():
            batch = ready.next_batch(block=False)
            if not batch:
                if time.monotonic() - idle_since >= WATCH_S:
                    watch.check()
                    idle_since = time.monotonic()
                time.sleep(POLL_S)
                continue
            for fut in batch:
                pending.discard(fut)
                _collect(fut, futures[fut], run, fell_back, bar)
                fut.release()
    except (KeyboardInterrupt, Stalled, *FATAL):
        client.cancel(list(pending))
        raise
    finally:
        bar.close()


def _submit(client, cfg, tasks) -> dict:
    """future -> task, every task submitted in the plan's order (block tasks after their
    sequence's residual task)."""
    from cluster.build import task_resources

    resources = task_resources(cfg.cluster, client)
    client.register_plugin(WorkerStatePlugin())   # each worker's WorkerState, kept across sweeps
    place = _placement(client, tasks)
    futures, streams = {}, {}                 # streams: (model, seq) -> its residual task
    for i, t in enumerate(tasks):
        waits = isinstance(t, (BlockTask, DepthTask, MemoryTask))     # for its sequence's h_l
        after = [streams[t.model.group, t.seq]] if waits and (t.model.group, t.seq) in streams else []
        # the list's order (tasks.py: layer by layer) is the order a worker runs what is ready
        fut = client.submit(run_task, t, *after, retries=RETRIES, pure=False, resources=resources,
                            priority=len(tasks) - i, **place(t))
        futures[fut] = t
        if isinstance(t, ResidualTask):
            streams.update({(t.model.group, s): fut for s in t.seqs})
    return futures


def _collect(fut, task, run: _Run, fell_back: set, bar) -> None:
    """One finished future: its result, or its error reported once per (model, layer, kind)
    with the traceback in the log; errors every later task would repeat stop the sweep."""
    try:
        run.results.append(fut.result())
        route = run.results[-1].get("route", "")
        if task.model.local and route.startswith("whole") and task.model.group not in fell_back:
            fell_back.add(task.model.group)           # said once per model
            _say(f"{task.model.group}: {route}")
    except FATAL as e:
        run.failures.exception(task.model.group, f"{task.part}, {task.step}", e)
        raise
    except Exception as e:  # the task's own error, after RETRIES; reported, not fatal
        run.errors.append(f"{task.describe()}: {type(e).__name__}: {e}")
        run.failures.exception(task.model.group, f"{task.part}, {task.step}", e)
    if isinstance(task, BlockTask):
        bar.update(1)
    elif isinstance(task, DepthTask):
        bar.update(task.fresh)


def _placement(client, tasks):
    """task -> submit() keywords: the blocks of one layer of a layer-local model prefer one
    worker (layers dealt round-robin over the workers present now), so each worker reads its
    layers' weights about once; a busy worker's tasks may still be stolen by an idle one."""
    workers = sorted(client.scheduler_info().get("workers", {}))
    layers = {}
    for t in tasks:
        if isinstance(t, (BlockTask, MemoryTask)) and t.model.local:
            layers.setdefault(t.model.group, set()).add(t.layer)
    rank = {(g, layer): i for g, ls in layers.items() for i, layer in enumerate(sorted(ls))}

    def place(t) -> dict:
        if len(workers) < 2 or not isinstance(t, (BlockTask, MemoryTask)) or not t.model.local:
            return {}
        return {"workers": [workers[rank[t.model.group, t.layer] % len(workers)]],
                "allow_other_workers": True}
    return place


def _verdict(cfg, root, within: dict, tasks, run: _Run) -> SweepResult:
    results, errors, interrupted, names = run.results, run.errors, run.interrupted, list(within)
    for name in names:
        st.record_worker_software(root, name, [r["software"] for r in results
                                               if r.get("model") == name and "software" in r])
    counts = ledger.counts(root, names, within)
    total, done, flagged, missing_a = counts.total, counts.done, counts.flagged, counts.missing_a_log
    walks, profiles = counts.missing_walks, counts.missing_memory
    complete = counts.complete
    for line in run.failures.lines():
        _say(f"failed: {line}")
    if run.stalled:
        _say(f"stopped: {run.stalled}")
    for what, key in (("J_tt", "jacobian_path"), ("linear algebra", "linalg")):
        used = collections.Counter(r[key] for r in results if key in r)
        if used:                              # which code computed this run's blocks
            _say(f"{what}: " + "; ".join(f"{lib} ({n} block{'s' * (n > 1)})"
                                         for lib, n in sorted(used.items())))
    if flagged:
        _say(f"warning: {flagged} block(s) hold non-finite values (ledger 2); see `tdos status`")
    n_blocks = sum(1 if isinstance(t, BlockTask) else t.fresh if isinstance(t, DepthTask) else 0
                   for t in tasks)
    if complete:
        _say(f"sweep complete: {done}/{total} blocks in {cfg.store} ({_what(cfg, within)}; "
             f"{n_blocks} computed in this run, {_duration(time.monotonic() - run.started)})")
    else:
        why = "interrupted" if interrupted else "stopped" if run.stalled else "incomplete"
        _say(f"sweep {why}: {done}/{total} blocks in {cfg.store}"
             f"{f', A_log missing for {missing_a} layer(s)' if missing_a else ''}"
             f"{f', {walks} walk(s) up the layers (stacks, Lyapunov) missing' if walks else ''}"
             f"{f', {profiles} token-memory profile(s) missing' if profiles else ''}; "
             f"nothing written is lost; {run.again} to finish")
    code = 0 if complete else (130 if interrupted else 1)
    return SweepResult(code, n_blocks, total, done, flagged, results, errors, interrupted,
                       run.stalled)


def _what(cfg, within: dict) -> str:
    """What the store holds, in words: the models, their nulls and members, layers, tokens."""
    trained, others = len(cfg.models), len(within) - len(cfg.models)
    layers = sorted({layer for rows, _ in within.values() for layer in rows})
    shown = (", ".join(map(str, layers)) if len(layers) <= 6
             else f"{layers[0]}..{layers[-1]} ({len(layers)})")
    more = f" and {others} null/ensemble model{'s' * (others > 1)}" if others > 0 else ""
    return (f"{trained} model{'s' * (trained > 1)}{more}, layers {shown}, "
            f"{cfg.inputs.sequences} x {cfg.inputs.length} tokens")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _say(line: str) -> None:
    tqdm.write(line, file=sys.stdout)


class _LivePlot:
    """Every `every` seconds, redraw the growing TDOS next to the store (<store>.live.png)
    with analysis.views.live.render_live when the analysis package provides it."""

    def __init__(self, store: str, every: float):
        self.store, self.every = store, every
        self.png = str(store).rstrip("/") + ".live.png"
        self._render = None
        self._announced = False
        if every > 0:
            with contextlib.suppress(ImportError):
                from analysis.views.live import render_live

                self._render = render_live
        self._renders = Repeating(self._tick, every, "tdos-live")

    def __enter__(self):
        if self._render is not None:
            self._renders.start()
        return self

    def __exit__(self, *exc):
        if self._renders.stop():
            self._draw()                      # the final picture holds every block
        return False

    def _tick(self) -> float | None:
        """One picture; the seconds until the next, None once drawing is disabled."""
        t = time.monotonic()
        if self._draw() and not self._announced:
            _say(f"live TDOS: {self.png}")
            self._announced = True
        if self._render is None:
            return None
        # a render of a large store takes longer than `every` (15 s for make real's 12
        # groups of 5 layers, 200 replicates each): paced so it holds the sweep's
        # process at most LIVE_SHARE of one core, which the workers need
        return max(self.every, (time.monotonic() - t) * (1 - LIVE_SHARE) / LIVE_SHARE)

    def _draw(self) -> bool:
        if self._render is None:
            return False
        try:
            self._render(self.store, self.png)
            return True
        except Exception as e:  # a plotting failure must not stop the sweep; say it once
            _say(f"live plot disabled: {type(e).__name__}: {e}")
            self._render = None
            return False
