"""`tdos analyze STORE [--out DIR] [--window LO HI] [--model NAME]` (sweep/cli.py delegates here)."""
from __future__ import annotations

import argparse
import sys

from .report import analyze
from .store import StoreError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tdos analyze", description="Figures 1–8, Table I, fits "
                                "JSON and a markdown report from a tdos store.")
    p.add_argument("store", help="path of the zarr store written by `tdos sweep`")
    p.add_argument("--out", default=None, help="output folder (default: STORE-report)")
    p.add_argument("--window", nargs=2, type=float, default=(1e-4, 5e-2), metavar=("LO", "HI"),
                   help="fit window for N(<λ) (default: the paper's 1e-4 5e-2)")
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
                          progress=not args.quiet)
    except StoreError as exc:
        print(f"tdos analyze: {exc}", file=sys.stderr)
        return 2
    out = args.out or args.store.rstrip("/") + "-report"
    for name, r in results.items():
        row = next((x for x in r.table.rows if x.L == r.L), r.table.rows[-1])
        print(f"{name}: layer {r.layer}, L = {row.L}: β = {row.beta:+.3f} "
              f"[{row.ci_lo:+.3f}, {row.ci_hi:+.3f}], R² = {row.r2:.3f}, {row.n_modes:,} modes")
    print(f"report: {out}/report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
