"""A one-screen spectral summary per (model, layer), read from the store's aggregate.

Printed when a sweep completes and by `tdos status --spectra`, so a researcher sees at a
glance what landed: how many modes are stable (0 < |ζ| < 1), how deep the infrared goes,
how many modes the symmetry-removed count drops (the norm's scale/shift modes, |ζ| = 1 to
rounding), and β of both mode counts with their CIs and difference, over every done token
of the layer. A model's null models (docs/nulls.md) are folded under it: one line per layer
with the lowest and highest β among them. Figures and Table I are `tdos analyze`'s job; this
is the sanity check.
"""
from __future__ import annotations

import numpy as np

from analysis.fit.fits import fit_ir_from_hist
from analysis.io.aggregate import aggregate
from analysis.io.store import open_store
from analysis.spectrum.rates import mode_key
from analysis.studies.tables import bootstrap_from_agg
from sweep.format.schema import null_families
from sweep.format.settings import MODES, Settings

N_BOOT = 200                 # replicates per CI: a quick look, not the report's 500


def layer_row(agg, name, layer, d_model, settings=None, n_boot=N_BOOT) -> dict:
    """Counts, smallest rate and β ± CI of both mode counts, every done token of `layer`
    (positions the settings skip left out; β over the settings' window, NaN when it holds
    no mode)."""
    s = settings or Settings()
    agg = agg.skipping(s.skip_positions)
    tokens = int(agg.token_done(layer).sum())
    sr = agg.special(layer, modes="symmetry-removed")
    row = {"model": name, "layer": int(layer), "tokens": tokens, "modes": tokens * d_model,
           "scale": sr["scale"], "marginal": sr["marginal"],
           "unstable": agg.special(layer, modes="all-stable")["unstable"],
           "lam_min": agg.min_rate(layer, modes="all-stable")}
    for m in MODES:
        k = mode_key(m)
        hist = agg.hist(layer, modes=m)
        row[f"stable_{k}"] = int(hist.sum())
        fit = fit_ir_from_hist(hist, s.window)
        boot, _ = bootstrap_from_agg(agg, layer, None, m, s.window, n_boot, s.level, s.seed)
        row.update({f"beta_{k}": fit.beta, f"ci_lo_{k}": boot.lo, f"ci_hi_{k}": boot.hi,
                    f"n_modes_{k}": fit.n_modes})
    row["delta_beta"] = row["beta_all_stable"] - row["beta_symmetry_removed"]
    return row


def null_row(aggs, of, layer, settings=None) -> dict | None:
    """A model's nulls at `layer` in one row: their done tokens summed, and the lowest and
    highest β (grid fit, no CI) of each mode count among the nulls with done tokens there;
    None when none has any."""
    s = settings or Settings()
    aggs = [a.skipping(s.skip_positions) for a in aggs]
    seen = [a for a in aggs if a.token_done(layer).any()]
    if not seen:
        return None
    row = {"model": of, "layer": int(layer), "nulls": len(aggs), "fitted": len(seen),
           "tokens": sum(int(a.token_done(layer).sum()) for a in seen)}
    for m in MODES:
        betas = [fit_ir_from_hist(a.hist(layer, modes=m), s.window).beta for a in seen]
        finite = [b for b in betas if np.isfinite(b)]
        row[f"beta_range_{mode_key(m)}"] = (min(finite), max(finite)) if finite else None
    return row


def summary_rows(path, settings=None, n_boot=N_BOOT) -> list[dict]:
    """One row per (trained model, layer) with done tokens, each model's followed by its
    nulls' rows (null_row, marked by the key "nulls"); brings `<store>.agg` up to date first.
    `settings` default: the store's recorded `analysis:` section."""
    agg = aggregate(path)
    st = open_store(path)
    settings = settings or Settings.from_store(st.root.attrs)
    rows = []
    for name, nulls in null_families(st.root).items():
        s, a = st.model(name), agg.model(name)
        for layer in s.layers:
            if not a.token_done(layer).any():
                continue
            row = layer_row(a, name, layer, s.d_model, settings, n_boot)
            if layer in s.ssm_layers:
                lam_a = s.intrinsic_rates(layer)
                row["lam_A"] = (float(lam_a.min()), float(lam_a.max()))
            rows.append(row)
        if nulls:
            rows += [r for layer in s.layers if (r := null_row([agg.model(n) for n in nulls],
                                                             name, layer, settings))]
    return rows


def _beta(r, k) -> str:
    if not np.isfinite(r[f"beta_{k}"]):
        return "no modes in window"
    return f"{r[f'beta_{k}']:+.3f} [{r[f'ci_lo_{k}']:+.3f},{r[f'ci_hi_{k}']:+.3f}]"


def _delta(v) -> str:
    return f"{v:+.3f}" if np.isfinite(v) else "–"


def summary_text(path) -> str:
    """What `tdos sweep` prints at the end and `tdos status --spectra` prints: the rows under
    the store's recorded settings."""
    settings = Settings.from_store(open_store(path).root.attrs)
    return format_summary(summary_rows(path, settings), settings)


def format_summary(rows: list[dict], settings=None) -> str:
    """The table as text, one line per layer, then what the columns count."""
    head = (f"{'model':<20} {'layer':>5} {'tokens':>7} {'stable':>7} {'sym.rm':>7} {'|ζ|≥1':>6} "
            f"{'λ min':>9}  {'β all-stable [CI]':<25} {'β symmetry-removed [CI]':<25} {'Δβ':>7}"
            f"  λ_A range")
    lines = [head]
    for r in rows:
        if "nulls" in r:
            lines.append(_null_line(r))
            continue
        lam_a = "" if "lam_A" not in r else f"{r['lam_A'][0]:.2g} … {r['lam_A'][1]:.2g}"
        share = r["stable_all_stable"] / r["modes"] if r["modes"] else 0.0
        lines.append(f"{r['model']:<20} {r['layer']:>5} {r['tokens']:>7} {share:>7.1%} "
                     f"{r['scale'] + r['marginal']:>7} {r['unstable']:>6} {r['lam_min']:>9.2e}  "
                     f"{_beta(r, 'all_stable'):<25} {_beta(r, 'symmetry_removed'):<25} "
                     f"{_delta(r['delta_beta']):>7}  {lam_a}")
    s = settings or Settings()
    skip = f" t ≥ {s.skip_positions}" if s.skip_positions else ""
    lines.append(f"stable: share of modes with 0 < |ζ| < 1 (all-stable); sym.rm: modes the "
                 f"symmetry-removed count drops (norm scale/shift, |ζ| = 1 to rounding); β on "
                 f"[{s.window[0]:g}, {s.window[1]:g}] over every done token{skip}, {s.level:.0%} "
                 f"bootstrap CI; Δβ = all-stable − symmetry-removed"
                 + ("; + nulls: a model's null models at that layer, tokens summed, β lowest … "
                    "highest among them (grid fit, no CI)" if any("nulls" in r for r in rows) else ""))
    return "\n".join(lines)


def _null_line(r) -> str:
    def rng(k):
        b = r[f"beta_range_{k}"]
        return "no modes in window" if b is None else f"{b[0]:+.3f} … {b[1]:+.3f}"
    who = f"+ {r['fitted']} of {r['nulls']} nulls" if r["fitted"] < r["nulls"] else f"+ {r['nulls']} nulls"
    return (f"  {who:<18} {r['layer']:>5} {r['tokens']:>7}  β all-stable {rng('all_stable')}, "
            f"symmetry-removed {rng('symmetry_removed')}")
