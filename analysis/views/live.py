"""A progress view of a running sweep: growing TDOS per layer and the current primary β.

`render_live` draws `<store>.live.png` and writes the store's primary β of every layer
(analysis/studies/primary.py: the estimator, mode count, window, level, unit and seed of the
report's headline) to `<store>.live.json` beside it. Its point value is the report's for the
done tokens; its interval is a quick preview, with LIVE_BOOT replicates where the report
uses `analysis.n_boot`, and every label says so. The spectra come from the incremental
aggregate (only blocks new since the last call are read).

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
from matplotlib.ticker import MaxNLocator

from analysis._format import replicates_words
from analysis._plot import new_figure, save, sweep_colors
from analysis.io.aggregate import aggregate
from analysis.io.store import open_store
from analysis.spectrum.observables import Spectrum
from analysis.studies.primary import (primary_beta, primary_of, primary_point, representative,
                                      store_settings)
from sweep.format.ledger import Ledger, is_done
from sweep.format.variants import Variant, folded
from sweep.format.settings import Settings

LIVE_BOOT = 200             # replicates per live CI and GOF p: a preview, redrawn every few seconds


def render_live(store_path, out_png, settings=None) -> Path:
    """Update the aggregate and write `out_png`; returns its path. `settings` default: the
    store's recorded `analysis:` section (the report's)."""
    agg = aggregate(store_path)
    st = open_store(store_path)
    settings = settings or store_settings(st)
    betas = {name: live_betas(st.model(name), agg.model(name), settings)
             for name in folded(st.root)}
    out = Path(save(live_figure(st, agg, settings, betas), Path(out_png), dpi=90))
    _write_json(out.with_suffix(".json"), {"fingerprint": st.fingerprint, "window": list(settings.window),
                                           "primary": primary_of(st, settings).name,
                                           "betas": betas, "method": beta_method(st, settings)})
    return out


def live_figure(st, agg, settings, betas=None):
    """One row of two panels per trained model (ρ per layer; primary β per layer over its
    nulls' band, its ensemble members' β as points beside it); `st` a Store of the store,
    `agg` its aggregate (analysis.io.aggregate), `betas` {model: live_betas} when already
    computed. A member is the trained model as far as its file can tell: no row of its own."""
    families, members = folded(st.root, "null"), folded(st.root, "ensemble")
    fig = new_figure(12, 4.2 * len(families))
    axes = np.atleast_2d(fig.subplots(len(families), 2, squeeze=False))
    skip = settings.skip_positions
    for (ax_rho, ax_beta), (name, nulls) in zip(axes, families.items()):
        s, a = st.model(name), agg.model(name)
        b = (betas or {}).get(name) or live_betas(s, a, settings)
        _model_panels(ax_rho, ax_beta, s, a.skipping(skip), settings, b)
        if nulls:
            _null_band(ax_beta, s, [(st.model(n), agg.model(n).skipping(skip)) for n in nulls],
                       settings)
        if members.get(name):
            _member_points(ax_beta, s, [(st.model(n), agg.model(n).skipping(skip))
                                        for n in members[name]], settings)
    fig.suptitle(f"{Path(st.path).name} — live at {time.strftime('%H:%M:%S')}")
    return fig


def preview(settings) -> Settings:
    """The report's settings with LIVE_BOOT replicates: the only difference of a preview."""
    return settings.replace(n_boot=min(LIVE_BOOT, settings.n_boot))


def beta_method(st, settings) -> str:
    """What the live β is, and how it differs from the report's, in one line."""
    window = settings.window
    skip = f" t ≥ {settings.skip_positions}" if settings.skip_positions else ""
    p = primary_of(st, settings)
    return (f"β: the store's primary ({p.name}; {p.why}) on [{window[0]:g}, {window[1]:g}], done "
            f"tokens{skip} t < L; quick preview: {settings.level:.0%} CI and GOF p from "
            f"{preview(settings).n_boot} replicates (the report: {settings.n_boot}), same unit, "
            f"seed and level; done counts every block in the ledger, flagged ones included")


def live_betas(st, agg, settings=None) -> dict:
    """{layer: {beta, lo, hi, L, n_modes, gof_p, unit, method}} of the store's primary β
    (`primary_beta` under `preview(settings)`); None where no token is done, β None where
    the window holds no mode."""
    settings = settings or Settings()
    out = {}
    for layer in st.layers:
        out[str(layer)] = (_beta_ci(st, agg, layer, settings)
                           if agg.skipping(settings.skip_positions).token_done(layer).any() else None)
    return out


def _beta_ci(st, agg, layer, settings) -> dict:
    h = primary_beta(st, layer, None, preview(settings), agg)
    ok = h.fitted and all(np.isfinite(v) for v in h.ci)
    return {"beta": h.beta if h.fitted else None, "lo": h.ci[0] if ok else None,
            "hi": h.ci[1] if ok else None, "L": h.L, "n_modes": h.n_modes,
            "gof_p": h.gof_p if np.isfinite(h.gof_p) else None, "unit": h.unit,
            "method": (f"{h.name}, {h.n_modes:,} modes, tokens t < {h.L}, {h.level:.0%} CI over "
                       f"{h.unit}, {replicates_words(h.unit, h.n_boot)} (quick preview; the "
                       f"report: {settings.n_boot}); GOF p {h.gof_p:.2g}"
                       + (": a window slope, not an exponent" if h.power_law_rejected else ""))}


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
    members = folded(st.root, "ensemble")
    models = [_model_counts(st.model(name), live.get("betas", {}).get(name, {}), nulls, members[name])
              for name, nulls in folded(st.root, "null").items()]
    done, total = (sum(m["counts"][k] + m["nulls"]["counts"][k] + m["ensemble"]["counts"][k]
                       for m in models) for k in ("done", "total"))
    verdict = (f"{done}/{total} blocks done" if running or done < total
               else f"complete: {done}/{total} blocks")
    included = [f"{what} included: {sum(m[k]['counts']['done'] for m in models)}/{t}"
                for k, what in (("nulls", "nulls"), ("ensemble", "ensemble members"))
                if (t := sum(m[k]["counts"]["total"] for m in models))]
    if included:
        verdict += f" ({'; '.join(included)})"
    if not running and done < total:
        verdict += "; rerun with --resume to finish"
    return {"store": store_path, "running": running, "updated": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "verdict": verdict, "primary": live.get("primary"), "window": live.get("window"), "method": live.get("method", "β appears once the live "
                                                        "plot has run (compute.live_every > 0)"),
            "models": models,
            "png": base64.b64encode(png.read_bytes()).decode() if png and png.is_file() else None}


def _model_counts(st, betas: dict, nulls: list, members: list) -> dict:
    """A trained model's rows per layer, and its nulls' (and its ensemble members') blocks
    summed over them and their layers."""
    led = Ledger.read(st.group)
    layers = []
    for layer in st.layers:
        done, flagged, total = led.row_counts(st.row(layer))
        layers.append({"layer": layer, "total": total, "done": done, "flagged": flagged,
                       "beta": betas.get(str(layer), {})})
    counts = {k: sum(r[k] for r in layers) for k in ("done", "flagged", "total")}
    return {"name": st.name, "counts": counts, "layers": layers, "nulls": _null_counts(st, nulls),
            "ensemble": _null_counts(st, members)}


def _null_counts(st, nulls: list) -> dict:
    """{models, kinds: {kind: [seeds]}, counts: {done, flagged, total}} of a model's nulls (or
    of its other variants)."""
    leds = [Ledger.read(st.root[n]) for n in nulls]
    kinds: dict = {}
    for n in nulls:
        v = Variant.from_attrs(st.root[n].attrs)
        kinds.setdefault(v.kind, []).append(v.seed)
    return {"models": list(nulls), "kinds": kinds,
            "counts": {"done": sum(x.done for x in leds), "flagged": sum(x.flagged for x in leds),
                       "total": sum(x.total for x in leds)}}


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _null_band(ax_beta, st, nulls, settings) -> None:
    """The lowest to highest current primary β of the nulls per layer (point estimates at the
    model's L, each null with done tokens there), the band a learned β is read against."""
    primary, L = primary_of(st, settings), representative(st, settings=settings)[1]
    betas = np.array([[primary_point(n, layer, min(L, st.layer_length[layer]), primary, settings)
                       if a.token_done(layer).any() else np.nan for layer in st.layers]
                      for n, a in nulls])                                   # (nulls, layers)
    seen = np.isfinite(betas).any(axis=0)
    if not seen.any():
        return
    lo, hi = np.nanmin(betas[:, seen], axis=0), np.nanmax(betas[:, seen], axis=0)
    layers = np.asarray(st.layers)[seen]
    ax_beta.fill_between(layers, lo, hi, color="0.75", alpha=0.6,
                         label=f"its {len(nulls)} nulls: lowest to highest β (point estimates)")
    ax_beta.plot(layers, lo, color="0.5", lw=0.6)
    ax_beta.plot(layers, hi, color="0.5", lw=0.6)
    done = sum(n.block_counts()["done"] for n, _ in nulls)
    planned = sum(n.block_counts()["planned"] for n, _ in nulls)
    ax_beta.legend(fontsize=7, title=f"nulls: {done}/{planned} blocks done", title_fontsize=7)


def _member_points(ax_beta, st, members, settings) -> None:
    """Each ensemble member's current primary β per layer (point estimates at the model's L),
    where it has done tokens."""
    primary, L = primary_of(st, settings), representative(st, settings=settings)[1]
    shown = False
    for n, a in members:
        pts = [(ly, primary_point(n, ly, min(L, st.layer_length[ly]), primary, settings))
               for ly in st.layers if ly in n.layers and a.token_done(ly).any()]
        pts = [(ly, b) for ly, b in pts if np.isfinite(b)]
        if pts:
            ax_beta.plot(*zip(*pts), "x", color="C3", ms=6, ls="none",
                         label=None if shown else f"its {len(members)} ensemble members "
                                                  f"(point estimates)")
            shown = True
    if shown:                               # the legend again, its nulls' title kept
        old = ax_beta.get_legend()
        ax_beta.legend(fontsize=7, title=old.get_title().get_text() if old else None,
                       title_fontsize=7)


def _model_panels(ax_rho, ax_beta, st, agg, settings, betas):
    """ρ of the primary's mode count per layer; the primary β per layer with its preview CI."""
    counts, window = st.block_counts(), settings.window
    primary = primary_of(st, settings)
    beta, lo, hi = (np.array([(betas.get(str(ly)) or {}).get(k) for ly in st.layers], dtype=float)
                    for k in ("beta", "lo", "hi"))
    for layer, b, c in zip(st.layers, beta, sweep_colors(len(st.layers))):
        h = agg.hist(layer, modes=primary.modes)
        if h.sum():
            Spectrum(h).plot(ax_rho, color=c, label=f"layer {layer}: β = {b:+.3f}")
    for v in window:
        ax_rho.axvline(v, color="0.6", ls=":", lw=0.8)
    ax_rho.set_ylabel(f"ρ_block(λ)  [{primary.modes} modes]")
    ax_rho.set_title(f"{st.name}: {counts['done']}/{counts['planned']} blocks done, "
                     f"{counts['flagged']} flagged")
    if ax_rho.get_legend_handles_labels()[0]:
        ax_rho.legend(fontsize=7, ncol=2 if len(st.layers) > 8 else 1, title=f"β: {primary.name}",
                      title_fontsize=7)
    else:                                     # no empty frame: say why there is nothing yet
        ax_rho.text(0.5, 0.5, "no block aggregated yet", ha="center", transform=ax_rho.transAxes)
        ax_beta.text(0.5, 0.5, "no β yet", ha="center", transform=ax_beta.transAxes)
    err = np.vstack([np.nan_to_num(beta - lo), np.nan_to_num(hi - beta)])
    ax_beta.errorbar(st.layers, beta, yerr=np.abs(err), fmt="o-", capsize=2,
                     label=f"{st.name}: {primary.name}, {settings.level:.0%} CI (preview)")
    ax_beta.axhline(0, color="k", lw=0.6)
    ax_beta.xaxis.set_major_locator(MaxNLocator(integer=True))      # a layer is a whole number
    ax_beta.set_xlabel("layer")
    # a jackknife refits once per sequence whatever n_boot says: the label counts what was drawn
    unit = next((b.get("unit") or "" for b in betas.values() if b), "")
    drawn = replicates_words(unit, preview(settings).n_boot)
    ax_beta.set_ylabel(f"β, {primary.name}\nquick preview: {drawn}"
                       + ("" if unit.startswith("jackknife") else f", report {settings.n_boot}"))
    ax_beta.legend(fontsize=7)
    done = is_done(agg.ledger())
    ax_beta.set_title("blocks aggregated per layer: " + ", ".join(
        f"{l}:{int(done[st.row(l)].sum())}" for l in st.layers[:12]), fontsize=8)
