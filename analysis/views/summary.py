"""A one-screen spectral summary per (model, layer), read from the store and its aggregate.

Printed when a sweep completes and by `tdos status --spectra`, so a researcher sees at a
glance what landed: how many modes are out of every count (|ζ| ≥ 1) and how many the
symmetry-removed count drops, each of all the modes, how deep the infrared goes, and the
store's primary β (analysis/studies/primary.py) of each layer: the number, interval and
goodness of fit `tdos analyze` prints for that (layer, L), under the same settings. A model's
null models (docs/nulls.md) are folded under it: one line per layer with the lowest and
highest primary β among them (point estimates). Figures and Table I are `tdos analyze`'s
job; this is the sanity check.
"""
from __future__ import annotations

import numpy as np

from analysis._format import replicates_words
from analysis.io.aggregate import aggregate
from analysis.io.store import open_store
from analysis.spectrum.rates import mode_key
from analysis.studies.primary import (primary_beta, primary_of, primary_point, representative,
                                      store_settings)
from sweep.format.variants import ROLES, folded
from sweep.format.settings import MODES, Settings


def layer_row(st, agg, layer, settings=None) -> dict:
    """Counts and smallest rate over every done token of `layer` (positions the settings skip
    left out), and the primary β at the layer's report L (`primary`: a Headline)."""
    s = settings or Settings()
    agg = agg.skipping(s.skip_positions)
    tokens = int(agg.token_done(layer).sum())
    sr = agg.special(layer, modes="symmetry-removed")
    row = {"model": st.name, "layer": int(layer), "tokens": tokens, "modes": tokens * st.d_model,
           "scale": sr["scale"], "marginal": sr["marginal"],
           "unstable": agg.special(layer, modes="all-stable")["unstable"],
           "lam_min": agg.min_rate(layer, modes="all-stable"),
           "primary": primary_beta(st, layer, None, s, agg)}
    for m in MODES:
        row[f"stable_{mode_key(m)}"] = int(agg.hist(layer, modes=m).sum())
    return row


def null_row(st, nulls, layer, settings=None, role: str = "null") -> dict | None:
    """A model's nulls (or its variants of another `role`: its ensemble members) at `layer` in
    one row: their done tokens summed, and the lowest and highest primary β (point estimates
    at the model's L, no CI) among those with done tokens there; None when none has any."""
    s = settings or Settings()
    seen = [(n, a) for n, a in ((n, a.skipping(s.skip_positions)) for n, a in nulls)
            if a.token_done(layer).any()]
    if not seen:
        return None
    primary = primary_of(st, s)
    L = min(representative(st, settings=s)[1], st.layer_length[layer])
    betas = [primary_point(n, layer, L, primary, s) for n, _ in seen]
    finite = [b for b in betas if np.isfinite(b)]
    return {"model": st.name, "layer": int(layer), "nulls": len(nulls), "fitted": len(seen),
            "what": "nulls" if role == "null" else "members",
            "tokens": sum(int(a.token_done(layer).sum()) for _, a in seen), "L": L,
            "beta_range": (min(finite), max(finite)) if finite else None}


def summary_rows(path, settings=None) -> list[dict]:
    """One row per (trained model, layer) with done tokens, each model's followed by its
    nulls' rows (null_row, marked by the key "nulls"); brings `<store>.agg` up to date first.
    `settings` default: the store's recorded `analysis:` section (the report's)."""
    agg = aggregate(path)
    st = open_store(path)
    settings = settings or store_settings(st)
    rows = []
    for name, by_role in _families(st.root).items():
        s, a = st.model(name), agg.model(name)
        for layer in s.layers:
            if not a.token_done(layer).any():
                continue
            row = layer_row(s, a, layer, settings)
            if layer in s.ssm_layers:
                lam_a = s.intrinsic_rates(layer)
                row["lam_A"] = (float(lam_a.min()), float(lam_a.max()))
            rows.append(row)
        for role, names in by_role.items():
            pairs = [(st.model(n), agg.model(n)) for n in names]
            rows += [r for layer in s.layers if (r := null_row(s, pairs, layer, settings, role))]
    return rows


def _of(part, whole) -> str:
    return f"{part} of {whole} ({part / whole:.0%})" if whole else f"{part} of 0"


def summary_text(path) -> str:
    """What `tdos sweep` prints at the end and `tdos status --spectra` prints: the rows under
    the store's recorded settings."""
    settings = store_settings(open_store(path))
    return format_summary(summary_rows(path, settings), settings)


def format_summary(rows: list[dict], settings=None) -> str:
    """The table as text, one line per layer, then what the columns count."""
    s = settings or Settings()
    primary = next((r["primary"] for r in rows if "primary" in r), None)
    name = primary.name if primary else "primary"
    head = (f"{'model':<20} {'layer':>5} {'tokens':>6} {'|ζ|≥1':>20} {'sym.rm':>18} {'λ min':>9}  "
            f"{'L':>4} β {name} [{s.level:.0%} CI], GOF p")
    lines = [head]
    for r in rows:
        if "nulls" in r:
            lines.append(_null_line(r))
            continue
        h = r["primary"]
        lam_a = "" if "lam_A" not in r else f"  λ_A {r['lam_A'][0]:.2g} … {r['lam_A'][1]:.2g}"
        lines.append(f"{r['model']:<20} {r['layer']:>5} {r['tokens']:>6} "
                     f"{_of(r['unstable'], r['modes']):>20} "
                     f"{_of(r['scale'] + r['marginal'], r['modes']):>18} {r['lam_min']:>9.2e}  "
                     f"{h.L:>4} {_beta(h)}{lam_a}")
    skip = f" t ≥ {s.skip_positions}" if s.skip_positions else ""
    units = sorted({r["primary"].unit for r in rows if "primary" in r})
    lines.append(
        f"tokens: token positions done{skip}, every sequence summed (the ledger's L is tokens "
        f"per sequence); |ζ|≥1: modes outside every count, of all modes (tokens × d_model); "
        f"sym.rm: modes the symmetry-removed count also drops (norm scale/shift, |ζ| = 1 to "
        f"rounding; marginal), of all modes; β: the store's "
        + (primary.describe_choice() if primary else "primary β")
        + f", at tokens t < L, on [{s.window[0]:g}, {s.window[1]:g}], {s.level:.0%} CI over "
        + ("; ".join(f"{u} ({replicates_words(u, s.n_boot)})" for u in units) or "tokens")
        + f", seed {s.seed}: the report's "
        f"number for that layer and L (`tdos analyze`, β across depth); a window slope where "
        f"the power law is rejected at {1 - s.level:.0%}"
        + ("; + nulls: a model's null models at that layer, tokens summed, primary β lowest … "
           "highest among them (point estimates, no CI)" if any("nulls" in r for r in rows) else ""))
    return "\n".join(lines)


def _beta(h) -> str:
    if not h.fitted:
        return "no modes in window"
    if not h.check:
        return h.check.text
    slope = "window slope " if h.power_law_rejected else ""
    return f"{slope}{h.beta:+.3f} [{h.ci[0]:+.3f},{h.ci[1]:+.3f}], p = {h.gof_p:.2g}"


def _null_line(r) -> str:
    b = r["beta_range"]
    rng = "no modes in window" if b is None else f"{b[0]:+.3f} … {b[1]:+.3f}"
    what = r.get("what", "nulls")
    who = (f"+ {r['fitted']} of {r['nulls']} {what}" if r["fitted"] < r["nulls"]
           else f"+ {r['nulls']} {what}")
    return f"  {who:<18} {r['layer']:>5} {r['tokens']:>6}  primary β at L = {r['L']} {rng}"


def _families(root) -> dict[str, dict[str, list[str]]]:
    """{trained model: {role: its variants of that role}} (roles with none left out), the
    models and the variants in store order."""
    by_role = {role: folded(root, role) for role in ROLES}
    return {m: {role: by_role[role][m] for role in ROLES if by_role[role][m]}
            for m in by_role[ROLES[0]]}
