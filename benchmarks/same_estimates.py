"""Does a fresh run reproduce a committed fits.json? Every number of the two, leaf by leaf.

    .venv/bin/python benchmarks/same_estimates.py docs/real/fits.json out/smollm2-real-report/fits.json

walks both documents together and compares every numeric leaf (point estimates, intervals,
p-values, counts: the analysis is seeded, so a rerun of the same store gives the same numbers,
and a resweep of the same config gives the same eigenvalues up to the eigensolver's rounding).
Strings (store paths, method texts) are not compared; a key present on one side only is
listed. Prints how many leaves agree exactly, the largest relative difference and the paths of
the first few that differ by more than --rtol (default 1e-6); exit 1 if any does.
"""
from __future__ import annotations

import argparse
import json
import math
import sys


def leaves(a, b, path=""):
    """(path, x, y) of every numeric leaf of a and b together; (path, None, None) where the
    two documents' shapes differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                yield f"{path}.{k}", None, None
            else:
                yield from leaves(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield f"{path}[len {len(a)} vs {len(b)}]", None, None
        for i, (x, y) in enumerate(zip(a, b)):
            yield from leaves(x, y, f"{path}[{i}]")
    elif isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        yield path, float(a), float(b)


def differs(x: float, y: float, rtol: float) -> float:
    """0 when equal (NaN equals NaN), else |x − y| / max(|x|, |y|)."""
    if (math.isnan(x) and math.isnan(y)) or x == y:
        return 0.0
    if math.isnan(x) or math.isnan(y) or math.isinf(x) or math.isinf(y):
        return math.inf
    return abs(x - y) / max(abs(x), abs(y))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("committed")
    ap.add_argument("fresh")
    ap.add_argument("--rtol", type=float, default=1e-6)
    args = ap.parse_args()
    with open(args.committed) as f, open(args.fresh) as g:
        a, b = json.load(f), json.load(g)
    n, exact, worst, bad, shape = 0, 0, 0.0, [], []
    for path, x, y in leaves(a, b):
        if x is None:
            shape.append(path)
            continue
        n += 1
        r = differs(x, y, args.rtol)
        exact += r == 0
        worst = max(worst, r)
        if r > args.rtol:
            bad.append((path, x, y))
    print(f"{n} numeric leaves: {exact} identical, largest relative difference {worst:.3g}; "
          f"{len(bad)} beyond rtol {args.rtol:g}; {len(shape)} present on one side only")
    for path, x, y in bad[:10]:
        print(f"  {path}: {x!r} vs {y!r}")
    for path in shape[:10]:
        print(f"  one side only: {path}")
    return 1 if bad or shape else 0


if __name__ == "__main__":
    sys.exit(main())
