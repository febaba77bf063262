"""How exact the generic path is on every tested family: the numbers of docs/models.md.

    .venv/bin/python benchmarks/exactness_families.py [family ...]   # some: printed, not written

For each family of tests/families.py (the checkpoints tests/test_families.py writes: tiny,
seeded, weights moved off their structured init), float64, 9 random tokens, both layers:
the relative differences of the generic path (a 4-token block, then a 5-token block after a
prefill) to the whole-sequence autograd oracle of the unmodified layer (tests/oracle.py) —
the layer's input h, J_tt's entries, J_tt's eigenvalues matched token by token (relative to
the largest |ζ|), Δ_t of Mamba-style layers against the values transformers passes its own
scan (of gated delta-rule layers: the log decay it passes its chunked kernel, over
exp(A_log)) — and the largest |J_ts| above the diagonal (exactly 0 when causal). Prints a
markdown table; writes benchmarks/results/exactness_families.md when it measured them all.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
L = 9


def measure(name, root, gen) -> list[dict]:
    from families import save_family
    from oracle import matched_eigvals_error, oracle_model, scan_deltas, sequence_jacobian

    from sweep.worker.model import load_model

    path = save_family(name, root, gen)
    ours = load_model(path, dtype="float64")
    ref = oracle_model(path)
    ids = torch.randint(0, ours.vocab_size, (L,), generator=torch.Generator().manual_seed(0))
    rel = lambda a, b: float((a - b).abs().max() / b.abs().max())  # noqa: E731
    rows = []
    for layer in range(ours.n_layers):
        h, J = sequence_jacobian(ref, layer, ids)
        upper = max(float(J[s, :, s + 1:].abs().max()) if s + 1 < L else 0.0 for s in range(L))
        engine = ours.jacobians(layer)
        blocks = [engine.run(ids, 0, 4), engine.run(ids, 4, L)]
        jac = torch.cat([b.jac for b in blocks])
        diag = torch.stack([J[t, :, t] for t in range(L)])
        delta = (rel(torch.cat([b.delta for b in blocks]), scan_deltas(ref, layer, ids))
                 if ours.kinds[layer].ssm else None)
        rows.append({"family": name, "layer": layer, "kind": ours.kinds[layer].kind,
                     "attention": blocks[-1].attention, "upper": upper,
                     "h": rel(torch.cat([b.inputs for b in blocks]), h),
                     "J": max(rel(jac[t], diag[t]) for t in range(L)),
                     "eig": matched_eigvals_error(torch.linalg.eigvals(jac).numpy(),
                                                  torch.linalg.eigvals(diag).numpy()),
                     "delta": delta})
    return rows


def main() -> None:
    import transformers
    import transformers.utils.logging as tl
    from families import FAMILIES, save_family, tolerance

    tl.set_verbosity_error()
    only = set(sys.argv[1:])
    gen = torch.Generator().manual_seed(0)
    lines = [f"transformers {transformers.__version__}, torch {torch.__version__}, float64, "
             f"{L} tokens", "",
             "| family | layer kinds | attention | max \\|J_ts\\|, s > t | h | J_tt | eig(J_tt) | Δ_t | bound (J / eig) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for name in FAMILIES:                       # one generator, in the tests' order
            if only and name not in only:
                save_family(name, Path(tmp), gen)   # the same weights as the tests' without measuring
                continue
            rows = measure(name, Path(tmp), gen)
            worst = {k: max(r[k] for r in rows) for k in ("upper", "h", "J", "eig")}
            deltas = [r["delta"] for r in rows if r["delta"] is not None]
            delta = f"{max(deltas):.1e}" if deltas else "–"
            lines.append(f"| {name} | {', '.join(r['kind'] for r in rows)} | "
                         f"{'/'.join(sorted({r['attention'] for r in rows}))} | {worst['upper']:.0e} | "
                         f"{worst['h']:.1e} | {worst['J']:.1e} | {worst['eig']:.1e} | {delta} | ")
            lines[-1] += f"{tolerance(name):.0e} / {tolerance(name, True):.0e} |"
            print(lines[-1], flush=True)
    if not only:                                    # some families: printed, the record kept
        out = Path(__file__).parent / "results" / "exactness_families.md"
        out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
