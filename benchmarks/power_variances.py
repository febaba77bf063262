"""The variances the dry run's power lines use, from SmolLM2's committed null comparisons.

    .venv/bin/python benchmarks/power_variances.py      (after `make real-docs`; make does it)

reads docs/real/fits.json and docs/real/layers-fits.json (`make real`: SmolLM2-135M in float64,
k = 4 nulls per kind, L = 32) and writes sweep/budget/variances.json: for every (declarable
observable, layer, null kind) they compare, three variances per unit of design, one sequence
of L0 = 32 tokens (docs/power.md):

- v_trained: the trained value's own sampling variance, se_t² x n, with se_t its interval's
  half-width over its quantile and n = sequences x tokens / L0 the comparison's units;
- v_null: one null's sampling variance the same way, the mean of its k nulls' se² x n;
- v_seed: the spread of a fresh seed beyond its sampling error, var(null values) − mean(se²),
  floored at 0.

Where both files compare the same (observable, layer, kind), the comparison with more
sequences is kept. tests/test_power.py holds the committed file to what this script makes of
the committed JSON.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SOURCES = (REPO / "docs" / "real" / "layers-fits.json", REPO / "docs" / "real" / "fits.json")
OUT = REPO / "sweep" / "budget" / "variances.json"
L0 = 32
# a fits.json observable label -> the declarable name (sweep/format/study.py OBSERVABLES)
LABELS = (("ln alignment of the kernel", "alignment"),
          ("ln nonnormality of the kernel", "kernel_nonnormality"),
          ("window mode density", "density"), ("log ‖J_tt‖_F²", "log_frobenius"),
          ("non-normality of J_tt", "nonnormality"), ("β", "beta"))


def declared_name(label: str) -> str | None:
    for key, name in LABELS:
        if key in label and not label.startswith("top Lyapunov"):
            return name
    return None


def se(est: dict, level: float) -> float:
    """The standard error an interval at `level` with `dof` degrees of freedom stands for."""
    from scipy import stats

    dof = est.get("dof") or np.inf
    q = stats.t.ppf(0.5 + level / 2, dof) if np.isfinite(dof) else stats.norm.ppf(0.5 + level / 2)
    return (est["hi"] - est["lo"]) / (2 * q)


def rows_of(doc: dict, source: str) -> list[dict]:
    """The null comparisons of one fits.json: (observable, layer, kind) and their variances."""
    out = []
    for model in doc["models"].values():
        found = [(c.get("layer", model["nulls"]["layer"]), c)
                 for c in model.get("nulls", {}).get("comparisons", [])]
        found += [(c["layer"], c) for c in model.get("nulls_across_depth", {}).get("rows", [])]
        L = model.get("nulls", {}).get("L", L0)
        for layer, c in found:
            name = declared_name(c["observable"])
            if name is None:
                continue
            n = c["sequences"] * L / L0
            nulls = list(c["nulls"].values())
            se_n = np.array([se(e, c["level"]) for e in nulls])
            values = np.array([e["value"] for e in nulls])
            out.append({"observable": name, "layer": int(layer), "kind": c["kind"],
                        "sequences": c["sequences"], "tokens": L, "k": len(nulls),
                        "v_trained": se(c["trained"], c["level"]) ** 2 * n,
                        "v_null": float(np.mean(se_n ** 2)) * n,
                        "v_seed": max(0.0, float(values.var(ddof=1) - np.mean(se_n ** 2))),
                        "delta": c["delta"], "source": source})
    return out


def build() -> dict:
    best: dict = {}
    for path in SOURCES:
        for row in rows_of(json.loads(path.read_text()), path.relative_to(REPO).as_posix()):
            key = (row["observable"], row["layer"], row["kind"])
            if key not in best or row["sequences"] > best[key]["sequences"]:
                best[key] = row
    if not best:
        raise SystemExit(f"no null comparisons with per-null estimates in {', '.join(map(str, SOURCES))}: "
                         f"read their layout in rows_of()")
    return {"L0": L0,
            "sources": {p.relative_to(REPO).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                        for p in SOURCES},
            "rows": [best[k] for k in sorted(best)]}


def main() -> None:
    made = build()
    OUT.write_text(json.dumps(made, indent=1) + "\n")
    print(f"{OUT.relative_to(REPO)}: {len(made['rows'])} rows", file=sys.stderr)


if __name__ == "__main__":
    main()
