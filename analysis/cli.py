"""`tdos analyze STORE [--out DIR] [--window LO HI] [--modes M] [--model NAME]`
(sweep/cli.py delegates here)."""
from __future__ import annotations

import argparse
import sys

from .rates import DEFAULT_MODES, MODES
from .report import analyze
from .store import StoreError
from .uncertainty import law_lines


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tdos analyze", description="Figures 1–8, Table I, fits "
                                "JSON and a markdown report from a tdos store.")
    p.add_argument("store", help="path of the zarr store written by `tdos sweep`")
    p.add_argument("--out", default=None, help="output folder (default: STORE-report)")
    p.add_argument("--window", nargs=2, type=float, default=(1e-4, 5e-2), metavar=("LO", "HI"),
                   help="fit window for N(<λ) (default: the paper's 1e-4 5e-2)")
    p.add_argument("--modes", choices=MODES, default=DEFAULT_MODES,
                   help="mode count the figures draw (default all-stable, the paper's: every "
                        "0 < |ζ| < 1; symmetry-removed also drops the norm's invariant-direction "
                        "and marginal modes); tables, fits.json and report.md carry both")
    p.add_argument("--lengths", nargs="+", type=int, default=None, metavar="L",
                   help="Table I lengths (default: the config's analysis.lengths, else 8, 16, …)")
    p.add_argument("--layer", type=int, default=None,
                   help="representative layer (default: the config's analysis.layer, else 24 "
                        "when stored, else the middle stored layer)")
    p.add_argument("--model", default=None, help="analyze only this model group")
    p.add_argument("--n-boot", type=int, default=500, help="bootstrap replicates per fit")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    lo, hi = args.window
    if not 0 < lo < hi:
        print(f"tdos analyze: --window needs 0 < LO < HI, got {lo:g} {hi:g}", file=sys.stderr)
        return 2
    try:
        results = analyze(args.store, args.out, (lo, hi), args.model, n_boot=args.n_boot,
                          progress=not args.quiet, modes=args.modes, lengths=args.lengths,
                          layer=args.layer)
    except StoreError as exc:
        print(f"tdos analyze: {exc}", file=sys.stderr)
        return 2
    out = args.out or args.store.rstrip("/") + "-report"
    for name, r in results.items():
        row = r.row()
        parts = [f"{m} β = {row.get('beta', m):+.3f} [{row.get('ci_lo', m):+.3f}, "
                 f"{row.get('ci_hi', m):+.3f}] ({row.get('n_modes', m):,} modes; CI resampled "
                 f"{row.get('ci_unit', m)})" for m in MODES]
        print(f"{name}: layer {r.layer}, L = {row.L}: " + "; ".join(parts)
              + f"; Δβ = {row.delta_beta:+.3f}")
        for line in law_lines(r.extra["laws"]) if r.extra.get("laws") else []:
            print("  " + line)
    print(f"report: {out}/report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
