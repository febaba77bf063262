"""The client side of a sweep: store, plan, cluster, submit, progress, live plot, verdict.

Re-running on the same config (with or without --resume) plans only the ledger cells
still at 0, so an interrupted or partly failed sweep is finished by running it again.
"""
from __future__ import annotations

import collections
import contextlib
import sys
import threading
from dataclasses import dataclass, field

from tqdm import tqdm

from sweep.config.load import SweepConfig, with_store
from sweep.errors import (CheckpointChanged, NonCausal, RouteFailed, SelfCheckFailed,
                          UnsupportedTransformers)
from sweep.plan.make import Plan, make_plan
from sweep.store import ledger
from sweep.store import writer as st
from sweep.store.lock import store_lock
from sweep.tasks import ALogTask, BlockTask, DepthTask, MemoryTask, ResidualTask, pending_tasks
from sweep.worker.task import run_task

RETRIES = 2          # task exceptions; a killed worker's tasks are rescheduled by the scheduler


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


def run_sweep(cfg: SweepConfig | Plan, store: str | None = None, workers: int | None = None,
              scheduler: str | None = None, resume: bool = False, *, client=None,
              progress: bool = True, wait: bool = False) -> SweepResult:
    """Run (or finish) the sweep `cfg` describes (a config, or its plan from make_plan);
    `client` reuses an existing dask Client. While it runs the store is locked: a second
    sweep of the same store stops at once (or, with `wait`, waits for this one)."""
    plan = cfg if isinstance(cfg, Plan) else make_plan(cfg)
    if store is not None:
        plan = Plan(with_store(plan.config, store), plan.models)
    cfg = plan.config
    with store_lock(cfg.store, wait=wait):
        root = st.open_store(plan, create=not resume)
        tasks = pending_tasks(plan, root)
        names = [m.name for m in plan.models]
        before = ledger.counts(root, names)
        results, errors, interrupted = [], [], False
        if tasks:
            for m in plan.models:
                _say(f"{m.name}: " + (f"whole model on every worker: {m.info.not_local}" if m.info.not_local
                                      else f"layer-local (at most {cfg.compute.resident_layers} "
                                           f"decoder layer(s) per worker, the residual stream in the store)"))
            with _connect(cfg, workers, scheduler, client) as c, _tdos_page(c, cfg) as page:
                _say(f"dashboard: {_dashboard(c)}{page.note}")
                with _LivePlot(cfg.store, cfg.compute.live_every):
                    try:
                        _execute(c, cfg, tasks, before, progress, results, errors)
                    except KeyboardInterrupt:
                        interrupted = True
        return _verdict(cfg, root, names, tasks, results, errors, interrupted)


def _connect(cfg, workers, scheduler, client):
    if client is not None:
        return contextlib.nullcontext(client)
    from cluster import connect

    return connect(cfg.cluster, workers, scheduler)


def _tdos_page(client, cfg):
    """The dashboard's /tdos page (cluster/page.py): registered now, updated until the end."""
    from analysis.views.live import live_snapshot
    from cluster.dashboard import TdosPage

    return TdosPage(client, lambda running: live_snapshot(cfg.store, running), cfg.compute.live_every)


def _dashboard(client) -> str:
    from cluster import dashboard_link

    return dashboard_link(client) or "(none)"


def _execute(client, cfg, tasks, before, progress, results, errors) -> None:
    from cluster import task_resources

    resources = task_resources(cfg.cluster, client)
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
    bar = tqdm(total=before.total, initial=before.done, unit="block", desc="blocks",
               disable=not progress, file=sys.stderr, smoothing=0.1)
    from distributed import as_completed

    fell_back = set()
    try:
        for fut in as_completed(list(futures)):
            task = futures[fut]
            try:
                results.append(fut.result())
                route = results[-1].get("route", "")
                if task.model.local and route.startswith("whole") and task.model.group not in fell_back:
                    fell_back.add(task.model.group)           # said once per model
                    _say(f"{task.model.group}: {route}")
            except (CheckpointChanged, NonCausal, SelfCheckFailed, RouteFailed, UnsupportedTransformers):
                # every later task would fail the same way
                client.cancel(list(futures))
                raise
            except Exception as e:  # the task's own error, after RETRIES; reported, not fatal
                errors.append(f"{_describe(task)}: {type(e).__name__}: {e}")
            if isinstance(task, BlockTask):
                bar.update(1)
            elif isinstance(task, DepthTask):
                bar.update(task.fresh)
            fut.release()
    except KeyboardInterrupt:
        client.cancel(list(futures))
        raise
    finally:
        bar.close()


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


def _describe(task) -> str:
    if isinstance(task, ALogTask):
        return f"{task.model.group} a_log layers {list(task.layers)}"
    if isinstance(task, ResidualTask):
        return f"{task.model.group} residual stream of seqs {list(task.seqs)}"
    if isinstance(task, MemoryTask):
        return f"{task.model.group} token memory of layer {task.layer} seq {task.seq}"
    if isinstance(task, DepthTask):
        return (f"{task.model.group} walk of seq {task.seq} block {task.block} up layers "
                f"{task.rows[0][1]}..{task.rows[-1][1]}")
    return f"{task.model.group} layer {task.layer} seq {task.seq} block {task.block}"


def _verdict(cfg, root, names, tasks, results, errors, interrupted) -> SweepResult:
    for name in names:
        st.record_worker_software(root, name, [r["software"] for r in results
                                               if r.get("model") == name and "software" in r])
    counts = ledger.counts(root, names)
    total, done, flagged, missing_a = counts.total, counts.done, counts.flagged, counts.missing_a_log
    walks, profiles = counts.missing_walks, counts.missing_memory
    complete = counts.complete
    for e in errors:
        _say(f"failed: {e}")
    for what, key in (("J_tt", "jacobian_path"), ("linear algebra", "linalg")):
        used = collections.Counter(r[key] for r in results if key in r)
        if used:                              # which code computed this run's blocks
            _say(f"{what}: " + "; ".join(f"{lib} ({n} block{'s' * (n > 1)})"
                                         for lib, n in sorted(used.items())))
    if flagged:
        _say(f"warning: {flagged} block(s) hold non-finite values (ledger 2); see `tdos status`")
    if complete:
        _say(f"sweep complete: {done}/{total} blocks in {cfg.store}")
    else:
        why = "interrupted" if interrupted else "incomplete"
        _say(f"sweep {why}: {done}/{total} blocks in {cfg.store}"
             f"{f', A_log missing for {missing_a} layer(s)' if missing_a else ''}"
             f"{f', {walks} walk(s) up the layers (stacks, Lyapunov) missing' if walks else ''}"
             f"{f', {profiles} token-memory profile(s) missing' if profiles else ''}; "
             f"rerun with --resume to finish")
    n_blocks = sum(1 if isinstance(t, BlockTask) else t.fresh if isinstance(t, DepthTask) else 0
                   for t in tasks)
    code = 0 if complete else (130 if interrupted else 1)
    return SweepResult(code, n_blocks, total, done, flagged, results, errors, interrupted)


def _say(line: str) -> None:
    tqdm.write(line, file=sys.stdout)


class _LivePlot:
    """Every `every` seconds, redraw the growing TDOS next to the store (<store>.live.png)
    with analysis.views.live.render_live when the analysis package provides it."""

    def __init__(self, store: str, every: float):
        self.store, self.every = store, every
        self.png = str(store).rstrip("/") + ".live.png"
        self._stop = threading.Event()
        self._render = None
        if every > 0:
            with contextlib.suppress(ImportError):
                from analysis.views.live import render_live

                self._render = render_live
        self._thread = threading.Thread(target=self._loop, daemon=True, name="tdos-live")

    def __enter__(self):
        if self._render is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
            self._draw()                      # the final picture holds every block
        return False

    def _loop(self) -> None:
        announced = False
        while not self._stop.wait(self.every):
            if self._draw() and not announced:
                _say(f"live TDOS: {self.png}")
                announced = True

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
