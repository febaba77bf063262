"""The demo models' fp32-against-fp64 rows of docs/analysis.md (Precision), layers 1 and 2.

Run after `tdos sweep configs/demo-precision.yaml`:
    .venv/bin/python benchmarks/precision_demo.py
Per model and layer: stable modes matched token by token (tokens), the rate below which fp32
does not resolve λ (median |δλ|/λ above 10 %), and Δβ = β_fp64 − β_fp32 of the cumulative fit
on [1e-4, 5e-2] at L = 8 … 128, both mode counts.
"""
from analysis.studies.precision import compare_precision
from sweep.format.settings import MODES

STORE = "out/demo-precision.zarr"

for m in ("mamba", "neox"):
    for layer in (1, 2):
        c = compare_precision(STORE, None, f"{m}-float64", f"{m}-float32", layer=layer,
                              lengths=[8, 16, 32, 64, 128])
        r = c.matched
        print(f"{m} layer {layer}: {r.lam_ref.size:,} matched ({r.n_tokens} tokens), "
              f"fp32 unresolved below {c.unresolved_below:.1e}")
        for k in MODES:
            print(f"    {k}: Δβ at L = {', '.join(map(str, c.lengths))}: "
                  + " | ".join(f"{v:+.3f}" for v in c.delta_beta(k).values()))
