"""The tdos page of the Dask dashboard: `/tdos` (HTML) and `/tdos.json` on the scheduler's
own HTTP server, beside Dask's `/status`.

Everything here runs in the scheduler process, put there by `client.run_on_scheduler(install,
snapshot)`. The client computes each snapshot (ledger counts, β and its CI, the live TDOS
picture) and pushes it; the scheduler only keeps the latest per store and serves it, so no
request handler ever reads a store or blocks the scheduler's event loop with analysis.

Self-contained on purpose (stdlib and tornado only): `cluster.dashboard` ships this module
to the scheduler by value, so a plain `dask scheduler` serves the page without tdos
installed there. No new listener: the routes join the dashboard's existing application.
"""
from __future__ import annotations

import html
import json

from tornado import web

EXTENSION = "tdos-page"      # key in Scheduler.extensions: {store path: latest snapshot}
REFRESH_SECONDS = 5          # browser reload period while any sweep on the page is running


def install(snapshot: dict, dask_scheduler=None) -> str:
    """Add the routes once, keep `snapshot` as its store's latest; returns the page's path."""
    pages = dask_scheduler.extensions.get(EXTENSION)
    if pages is None:
        app = getattr(dask_scheduler, "http_application", None)
        if app is None:
            raise RuntimeError("this scheduler serves no dashboard (dashboard_address is None)")
        pages = dask_scheduler.extensions[EXTENSION] = {}
        app.add_handlers(r".*", [(r"/tdos", PageHandler, {"pages": pages}),
                                 (r"/tdos\.json", JsonHandler, {"pages": pages})])
    pages.pop(snapshot["store"], None)                 # newest sweep first on the page
    pages[snapshot["store"]] = snapshot
    return "/tdos"


class JsonHandler(web.RequestHandler):
    def initialize(self, pages):
        self.pages = pages

    def get(self):
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps({"sweeps": [_without_png(s) for s in reversed(self.pages.values())]}))


class PageHandler(web.RequestHandler):
    def initialize(self, pages):
        self.pages = pages

    def get(self):
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.write(render(list(reversed(self.pages.values()))))


def _without_png(snapshot: dict) -> dict:
    return {k: v for k, v in snapshot.items() if k != "png"}


def render(snapshots: list[dict]) -> str:
    """The whole page: one section per sweep pushed to this scheduler, newest first."""
    running = any(s.get("running") for s in snapshots)
    refresh = f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">' if running else ""
    body = "".join(_section(s) for s in snapshots) or "<p>No tdos sweep has run on this scheduler.</p>"
    return (f"<!doctype html><html><head><meta charset='utf-8'>{refresh}<title>tdos</title>"
            f"<style>{_CSS}</style></head><body><h1>tdos sweeps on this scheduler</h1>"
            f"<p class='nav'><a href='status'>Dask status</a> · <a href='tdos.json'>tdos.json</a>"
            f"{' · reloads every %d s while a sweep runs' % REFRESH_SECONDS if running else ''}</p>"
            f"{body}</body></html>")


def _section(s: dict) -> str:
    e = html.escape
    state = "running" if s.get("running") else "ended"
    out = [f"<section><h2>{e(s['store'])}</h2>",
           f"<p class='{state}'>{state} · {e(s.get('verdict', ''))} · updated {e(s.get('updated', ''))}</p>"]
    for m in s.get("models", []):
        out.append(_model_table(m, s))
    if s.get("png"):
        out.append(f"<img alt='live TDOS' src='data:image/png;base64,{s['png']}'>")
    out.append(f"<p class='note'>{e(s.get('method', ''))}</p></section>")
    return "".join(out)


def _model_table(m: dict, s: dict) -> str:
    """One row per layer: blocks, and the store's primary β (one estimator, one mode count)."""
    e = html.escape
    primary = s.get("primary") or "primary"
    rows = []
    for r in m["layers"]:
        rows.append(f"<tr><td>{r['layer']}</td><td>{r['done']}</td><td>{r['flagged']}</td>"
                    f"<td>{r['total']}</td>{_beta_cell(r.get('beta'))}</tr>")
    c = m["counts"]
    return (f"<h3>{e(m['name'])}: {c['done']}/{c['total']} blocks done, {c['flagged']} flagged</h3>"
            f"<table><tr><th>layer</th><th>done</th><th>flagged</th><th>total</th>"
            f"<th>β {e(primary)} [CI], quick preview</th></tr>{''.join(rows)}</table>"
            f"{_nulls_line(m.get('nulls'))}")


def _nulls_line(n: dict | None) -> str:
    """A trained model's null models in one line under its table: their blocks, every layer."""
    if not n or not n.get("models"):
        return ""
    kinds = "; ".join(f"{k} {', '.join(map(str, seeds))}" for k, seeds in n["kinds"].items())
    c, count = n["counts"], len(n["models"])
    return (f"<p class='nulls'>+ nulls: {count} model{'s' * (count > 1)} ({html.escape(kinds)}): "
            f"{c['done']}/{c['total']} blocks done, {c['flagged']} flagged (summed over them and "
            f"their layers)</p>")


def _beta_cell(b: dict | None) -> str:
    """β [CI] at L, "window slope" where the power law is rejected; hovering shows how it was
    made (estimator, level, replicates, resampling unit, GOF p)."""
    if not b or b.get("beta") is None:
        return "<td>–</td>"
    ci = "" if b.get("lo") is None else f" [{b['lo']:+.3f}, {b['hi']:+.3f}]"
    slope = "window slope " if "window slope" in b.get("method", "") else ""
    return (f"<td title='{html.escape(b.get('method', ''), quote=True)}'>{slope}{b['beta']:+.3f}"
            f"{ci} at L = {b.get('L', '?')}</td>")


_CSS = ("body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;"
        "margin:.5em 0}td,th{border:1px solid #bbb;padding:.2em .6em;text-align:right}"
        "th{background:#eee}img{max-width:100%;border:1px solid #ddd}.running{color:#0a6}"
        ".ended{color:#555}.note,.nav{color:#666;font-size:90%}section{margin-bottom:2em}"
        ".nulls{margin:.2em 0 1em 1em;color:#444}")
