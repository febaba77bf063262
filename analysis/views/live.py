"""A cheap progress view of a running sweep: growing TDOS per layer and the current β.

`render_live` draws `<store>.live.png` and writes β with its bootstrap CI for both mode
counts to `<store>.live.json` beside it. Only blocks new since the last call are read (the
incremental aggregate), and β comes from the aggregated histograms (`fit_ir_from_hist`),
which equals the raw-rate grid fit exactly.

`live_snapshot` is what the dashboard's /tdos page shows (cluster/page.py): ledger counts
read now, plus the last picture and β that `render_live` wrote.

Both show the trained models only; each model's null models (docs/nulls.md) are folded under
it: in the figure, the band of their current β per layer beside the model's, and in the
snapshot, their blocks summed into one line.
"""
from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

import numpy as np

from analysis._plot import new_figure, save, sweep_colors
from analysis.fit.fits import fit_ir_from_hist
from analysis.io.aggregate import aggregate
from analysis.io.store import open_store
from analysis.spectrum.observables import Spectrum
from analysis.studies.tables import bootstrap_from_agg
from sweep.format.ledger import Ledger, is_done
from sweep.format.schema import null_families
from sweep.format.settings import DEFAULT_MODES, MODES, Settings

LIVE_BOOT = 200             # bootstrap draws per live β CI (the report uses more)


def render_live(store_path, out_png, settings=None) -> Path:
    """Update the aggregate and write `out_png`; returns its path. `settings` default: the
    store's recorded `analysis:` section (its window, level, seed and skipped positions)."""
    agg = aggregate(store_path)
    st = open_store(store_path)
    settings = settings or Settings.from_store(st.root.attrs)
    out = Path(save(live_figure(st, agg, settings), Path(out_png), dpi=90))
    betas = {name: live_betas(agg.model(name), settings) for name in null_families(st.root)}
    _write_json(out.with_suffix(".json"), {"fingerprint": st.fingerprint, "window": list(settings.window),
                                           "betas": betas, "method": beta_method(settings)})
    return out


def live_figure(st, agg, settings):
    """One row of two panels per trained model (ρ per layer; β per layer over its nulls' band);
    `st` a Store of the store, `agg` its aggregate (analysis.io.aggregate)."""
    families = null_families(st.root)
    fig = new_figure(12, 4.2 * len(families))
    axes = np.atleast_2d(fig.subplots(len(families), 2, squeeze=False))
    skip = settings.skip_positions
    for (ax_rho, ax_beta), (name, nulls) in zip(axes, families.items()):
        _model_panels(ax_rho, ax_beta, st.model(name), agg.model(name).skipping(skip), settings.window)
        if nulls:
            _null_band(ax_beta, st.model(name),
                       [(st.model(n), agg.model(n).skipping(skip)) for n in nulls], settings.window)
    fig.suptitle(f"{Path(st.path).name} — live at {time.strftime('%H:%M:%S')}")
    return fig


def beta_method(settings) -> str:
    window = settings.window
    skip = f" t ≥ {settings.skip_positions}" if settings.skip_positions else ""
    return (f"β: slope − 1 of the grid fit of N(<λ) over λ in [{window[0]:g}, {window[1]:g}], "
            f"all done tokens{skip}; CI: {settings.level:.0%} bootstrap, {LIVE_BOOT} replicates (the "
            f"resampling unit per layer is in tdos.json); done counts every block in the "
            f"ledger, flagged ones included")


def live_betas(agg, settings=None) -> dict:
    """{layer: {modes: {beta, lo, hi, method}}} for both mode counts; None where no token is
    done. The same CI as `tdos analyze` (tables.bootstrap_from_agg), with fewer replicates;
    β None where the window holds no mode."""
    settings = settings or Settings()
    agg = agg.skipping(settings.skip_positions)
    out = {}
    for layer in agg.layers:
        out[str(layer)] = {m: _beta_ci(agg, layer, m, settings) for m in MODES}
    return out


def _beta_ci(agg, layer, modes, settings) -> dict | None:
    if not agg.token_done(layer).any():
        return None
    ci, _ = bootstrap_from_agg(agg, layer, None, modes, settings.window, LIVE_BOOT, settings.level,
                               seed=settings.seed)
    ok = all(np.isfinite(v) for v in (ci.beta, ci.lo, ci.hi))
    return {"beta": float(ci.beta) if np.isfinite(ci.beta) else None,
            "lo": float(ci.lo) if ok else None, "hi": float(ci.hi) if ok else None,
            "method": ci.method}


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)                  # a reader never sees half a file


def live_snapshot(store_path, running: bool, png=None) -> dict:
    """What /tdos shows for `store_path` now (JSON-able): per-layer ledger counts, and the
    β CIs and picture of the last `render_live` (`png`, default `<store>.live.png`)."""
    store_path = os.path.abspath(os.fspath(store_path))
    png = Path(png or store_path.rstrip("/") + ".live.png")
    st = open_store(store_path)
    live = _read_json(png.with_suffix(".json"))
    if live.get("fingerprint") != st.fingerprint:      # left by another sweep at this path
        live, png = {}, None
    models = [_model_counts(st.model(name), live.get("betas", {}).get(name, {}), nulls)
              for name, nulls in null_families(st.root).items()]
    done = sum(m["counts"]["done"] + m["nulls"]["counts"]["done"] for m in models)
    total = sum(m["counts"]["total"] + m["nulls"]["counts"]["total"] for m in models)
    null_done = sum(m["nulls"]["counts"]["done"] for m in models)
    null_total = sum(m["nulls"]["counts"]["total"] for m in models)
    verdict = (f"{done}/{total} blocks done" if running or done < total
               else f"complete: {done}/{total} blocks")
    if null_total:
        verdict += f" (nulls included: {null_done}/{null_total})"
    if not running and done < total:
        verdict += "; rerun with --resume to finish"
    return {"store": store_path, "running": running, "updated": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "verdict": verdict, "modes": list(MODES), "default_modes": DEFAULT_MODES,
            "window": live.get("window"), "method": live.get("method", "β appears once the live "
                                                        "plot has run (compute.live_every > 0)"),
            "models": models,
            "png": base64.b64encode(png.read_bytes()).decode() if png and png.is_file() else None}


def _model_counts(st, betas: dict, nulls: list) -> dict:
    """A trained model's rows per layer, and its nulls' blocks summed over them and their layers."""
    led = Ledger.read(st.group)
    layers = []
    for layer in st.layers:
        done, flagged, total = led.row_counts(st.row(layer))
        layers.append({"layer": layer, "total": total, "done": done, "flagged": flagged,
                       "beta": betas.get(str(layer), {})})
    counts = {k: sum(r[k] for r in layers) for k in ("done", "flagged", "total")}
    return {"name": st.name, "counts": counts, "layers": layers, "nulls": _null_counts(st, nulls)}


def _null_counts(st, nulls: list) -> dict:
    """{models, kinds: {kind: [seeds]}, counts: {done, flagged, total}} of a model's nulls."""
    leds = [Ledger.read(st.root[n]) for n in nulls]
    kinds: dict = {}
    for n in nulls:
        null = st.root[n].attrs["null"]
        kinds.setdefault(null["kind"], []).append(int(null["seed"]))
    return {"models": list(nulls), "kinds": kinds,
            "counts": {"done": sum(x.done for x in leds), "flagged": sum(x.flagged for x in leds),
                       "total": sum(x.total for x in leds)}}


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _null_band(ax_beta, st, nulls, window) -> None:
    """The lowest to highest current β of the nulls per layer (grid fit, each null with done
    tokens there), the band a learned β is read against."""
    betas = np.array([[fit_ir_from_hist(a.hist(layer), window).beta if a.token_done(layer).any()
                       else np.nan for layer in st.layers] for _, a in nulls])     # (nulls, layers)
    seen = np.isfinite(betas).any(axis=0)
    if not seen.any():
        return
    lo, hi = np.nanmin(betas[:, seen], axis=0), np.nanmax(betas[:, seen], axis=0)
    layers = np.asarray(st.layers)[seen]
    ax_beta.fill_between(layers, lo, hi, color="0.75", alpha=0.6,
                         label=f"its {len(nulls)} nulls: lowest to highest β")
    ax_beta.plot(layers, lo, color="0.5", lw=0.6)
    ax_beta.plot(layers, hi, color="0.5", lw=0.6)
    done = sum(n.block_counts()["done"] for n, _ in nulls)
    planned = sum(n.block_counts()["planned"] for n, _ in nulls)
    ax_beta.legend(fontsize=7, title=f"nulls: {done}/{planned} blocks done", title_fontsize=7)


def _model_panels(ax_rho, ax_beta, st, agg, window):
    counts = st.block_counts()
    betas, errs = [], []
    for layer, c in zip(st.layers, sweep_colors(len(st.layers))):
        h = agg.hist(layer)
        fit = fit_ir_from_hist(h, window)
        betas.append(fit.beta)
        errs.append(fit.stderr)
        if h.sum():
            Spectrum(h).plot(ax_rho, color=c, label=f"layer {layer}: β = {fit.beta:+.3f}")
    for v in window:
        ax_rho.axvline(v, color="0.6", ls=":", lw=0.8)
    ax_rho.set_ylabel("ρ_block(λ)")
    ax_rho.set_title(f"{st.name}: {counts['done']}/{counts['planned']} blocks done, "
                     f"{counts['flagged']} flagged")
    if ax_rho.get_legend_handles_labels()[0]:
        ax_rho.legend(fontsize=7, ncol=2 if len(st.layers) > 8 else 1)
    ax_beta.errorbar(st.layers, betas, yerr=errs, fmt="o-", capsize=2, label=st.name)
    ax_beta.axhline(0, color="k", lw=0.6)
    ax_beta.set_xlabel("layer")
    ax_beta.set_ylabel("current β (grid fit, ± regression s.e.)")
    done = is_done(agg.ledger())
    ax_beta.set_title("blocks aggregated per layer: " + ", ".join(
        f"{l}:{int(done[st.row(l)].sum())}" for l in st.layers[:12]), fontsize=8)
