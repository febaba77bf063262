"""The worker's self-check on every tested family: its error between two correct routes, and
its cost against one block. The numbers of docs/models.md ("The self-check").

    .venv/bin/python benchmarks/selfcheck_families.py [family ...]

For each family of tests/families.py (tiny, seeded, weights moved off their init), float32
and float64, every layer, the generic path and (where one is kept) the hand-written one:
sweep/generic/selfcheck.py's `diagonal_error` — uᵀJ_tt of the engine at the last of 4 random
tokens against autograd of the unmodified layer's whole-sequence call, relative to the
layer's share uᵀ(J_tt − I) — beside the dtype's bound. Writes
benchmarks/results/selfcheck_families.md.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]


def measure(name: str, root: Path, gen) -> list[dict]:
    from families import save_family

    from sweep.generic import selfcheck
    from sweep.worker.model import load_model

    path = save_family(name, root, gen)
    rows = []
    for dtype in ("float32", "float64"):
        model = load_model(path, dtype=dtype)
        engines = ["generic"] + (["fast"] if model.fast else [])
        ids = selfcheck.probe_ids(model.vocab_size)
        for layer in range(model.n_layers):
            call = selfcheck.whole_sequence_call(model.hf, layer, ids)
            for engine in engines:
                jac = model.token_jacobian(layer, ids, len(ids) - 1, engine)
                rows.append({"family": name, "dtype": dtype, "layer": layer, "engine": engine,
                             "error": selfcheck.diagonal_error(call, jac),
                             "bound": selfcheck.bound(model.dtype)})
    return rows


def main(names: list[str]) -> None:
    from families import FAMILIES

    names = names or sorted(FAMILIES)
    gen = torch.Generator().manual_seed(0)
    lines = ["| family | dtype | engine | worst error (layers) | bound |", "|---|---|---|---|---|"]
    worst = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            for r in measure(name, Path(tmp), gen):
                key = (r["family"], r["dtype"], r["engine"])
                worst[key] = max(worst.get(key, 0.0), r["error"])
    for (family, dtype, engine), err in sorted(worst.items()):
        bound = selfcheck_bound(dtype)
        lines.append(f"| {family} | {dtype} | {engine} | {err:.1e} | {bound:g} |")
    for dtype in ("float32", "float64"):
        top = max(e for (_, d, _), e in worst.items() if d == dtype)
        lines.append(f"\nworst {dtype}: {top:.1e} (bound {selfcheck_bound(dtype):g})")
    text = "\n".join(lines)
    print(text)
    (ROOT / "benchmarks" / "results" / "selfcheck_families.md").write_text(text + "\n")


def selfcheck_bound(dtype: str) -> float:
    from sweep.generic import selfcheck
    from sweep.numerics.dtypes import torch_dtype

    return selfcheck.bound(torch_dtype(dtype))


if __name__ == "__main__":
    main(sys.argv[1:])
