"""fp32 against fp64: the numbers of docs/analysis.md ("Mode counts", "Precision"), written to
docs/demo/precision.json, which docs/templates/analysis.md quotes (`make precision-docs`).

    .venv/bin/python benchmarks/precision_demo.py checkpoint   # the random Mamba-370M-shaped block
    .venv/bin/python benchmarks/precision_demo.py              # the JSON, from the runs below

It reads three runs, made first by `make precision-docs`:
- `tdos sweep configs/demo-precision.yaml` and `tdos analyze out/demo-precision.zarr --out
  out/demo-precision-report`: both demo checkpoints, each in fp32 and fp64, layers 1 and 2;
  the mode-count rows are that analysis's Table I rows at L = 128 (fits.json `tables_by_layer`);
- `tdos sweep configs/precision-random-mamba.yaml`: a random-init block of Mamba-370M's shape
  in both precisions, layer 1.
The precision rows are `compare_precision` at each layer: stable modes matched token by token,
the rate below which fp32 does not resolve λ (median |δλ|/λ above 10 % in a quarter decade),
and β of the cumulative fit of each precision from every stable rate at each L.
"""
import json
import sys
from pathlib import Path

import numpy as np
import torch

from analysis.io.store import open_store
from analysis.studies.precision import RESOLVED_MAX, compare_precision
from analysis.studies.primary import store_settings
from sweep.format.settings import MODES

DEMO_STORE, DEMO_REPORT = "out/demo-precision.zarr", "out/demo-precision-report/fits.json"
RANDOM_STORE, RANDOM_CHECKPOINT = "out/precision-random-mamba.zarr", "out/random-mamba-370m-shape"
OUT = Path("docs/demo/precision.json")
L_COUNTS = 128
ROW_FIELDS = ("n_tokens", "beta_all_stable", "ci_lo_all_stable", "ci_hi_all_stable",
              "beta_symmetry_removed", "ci_lo_symmetry_removed", "ci_hi_symmetry_removed",
              "mle_beta_all_stable", "mle_beta_symmetry_removed", "delta_beta", "sym_removed",
              "sym_stable", "sym_below", "sym_inside", "n_below_all_stable",
              "floor_all_stable", "n_unresolved_all_stable", "floor_source_all_stable",
              "ci_unit_all_stable")

ABOUT = {
    "counts": "Table I rows of `tdos analyze out/demo-precision.zarr` at L = 128 (4 sequences x"
              " 128 bytes of configs/demo-text.py.txt, positions 0..127: 512 tokens), layers 1 "
              "and 2 of each model in its dtype; beta_* the cumulative fit of N(<λ) on the "
              "window, CI a jackknife over the 4 sequences with t(3); all-stable = every "
              "eigenvalue with 0 < |ζ| < 1, in fp32 above floor_all_stable "
              "(n_unresolved_all_stable left out); symmetry-removed = all-stable minus the "
              "norm's scale/shift mode per token and |λ| below the marginal threshold; "
              "delta_beta = all-stable minus symmetry-removed; sym_removed / sym_stable / "
              "sym_below / sym_inside = modes that count drops, of them stable, of those below "
              "the window and inside it",
    "precision": "compare_precision(fp64 reference, fp32 other) at one layer: matched_pairs = "
                 "stable-in-fp64 modes paired token by token with their fp32 eigenvalue "
                 "(Hungarian matching) over tokens t < L_max of every sequence; "
                 "unresolved_below = upper edge of the highest quarter decade of λ_64 whose "
                 "median |δλ|/λ exceeds resolved_max_rel_err; beta[count][L] = [β_fp64, "
                 "β_fp32], the cumulative fit on the window of every stable rate of positions t"
                 " < L (no resolution floor: what rounding does to the same count); delta_beta "
                 "= β_fp64 − β_fp32; smallest_rate_ref = the smallest matched fp64 rate",
    "summary": "ranges over the demo rows above (and the random row's fp64 gap between the "
               "counts at its longest L), computed from them by this script",
}


def make_checkpoint(path=RANDOM_CHECKPOINT) -> None:
    """A random-init MambaForCausalLM with Mamba-370M's block (d_model 1024, d_state 16,
    expand 2, d_conv 4, dt_rank 64, RMSNorm eps 1e-5), 2 layers and a 1,024-token vocabulary,
    which leave the block's shape unchanged; transformers' default initialisation, seed 0."""
    from transformers import MambaConfig, MambaForCausalLM

    cfg = MambaConfig(vocab_size=1024, hidden_size=1024, num_hidden_layers=2, state_size=16,
                      expand=2, conv_kernel=4, time_step_rank=64, layer_norm_epsilon=1e-5)
    torch.manual_seed(0)
    MambaForCausalLM(cfg).save_pretrained(path)
    print(f"wrote {path}")


def _need(path, fix) -> None:
    if not Path(path).exists():
        sys.exit(f"precision_demo: {path} not found — {fix}")


def precision_row(store, group, model, checkpoint, layer, lengths) -> dict:
    """compare_precision of the store's `group`-float64 and `group`-float32 at `layer`."""
    c = compare_precision(store, None, f"{group}-float64", f"{group}-float32", layer=layer,
                          lengths=lengths)
    return {"model": model, "checkpoint": checkpoint, "store": store, **c.to_dict(),
            "smallest_rate_ref": float(c.matched.lam_ref.min())}


def counts_rows(fits) -> list:
    rows = []
    for name, m in fits["models"].items():
        for layer, table in sorted(m["tables_by_layer"].items()):
            r = next(x for x in table if x["L"] == L_COUNTS)
            rows.append({"name": name, "model": name.split("-")[0], "dtype": m["dtype"],
                         "layer": int(layer), "L": L_COUNTS, **{k: r[k] for k in ROW_FIELDS}})
    return rows


def summary(counts, demo, rand, lo_edge) -> dict:
    """Ranges the prose quotes: over the demo's fp64 rows and its four precision rows."""
    fp64 = {(r["model"], r["layer"]): r for r in counts if r["dtype"] == "float64"}
    fp32 = {(r["model"], r["layer"]): r for r in counts if r["dtype"] == "float32"}
    half64 = {k: (r["ci_hi_all_stable"] - r["ci_lo_all_stable"]) / 2 for k, r in fp64.items()}
    gap64 = [abs(r["delta_beta"]) for r in fp64.values()]
    floors = [p["unresolved_below"] for p in demo]
    out = {"gap_fp64": [min(gap64), max(gap64)],
           "ci_half_all_stable_fp64": [min(half64.values()), max(half64.values())],
           "unresolved_below": [min(floors), max(floors)],
           "unresolved_decades_below_window": [float(np.log10(lo_edge / f))
                                               for f in (max(floors), min(floors))]}
    for k in MODES:
        every = [abs(v) for p in demo for v in p["delta_beta"][k].values()]
        last = [abs(p["delta_beta"][k][max(p["lengths"])]) for p in demo]
        out[f"max_abs_delta_beta_{k}"] = {"any_L": max(every), "L_max": max(last)}
    moves = [{"model": p["model"], "layer": p["layer"], "L": L, "count": k, "value": v}
             for p in demo for k in MODES for L, v in p["delta_beta"][k].items()]
    out["largest_delta_beta"] = max(moves, key=lambda m: abs(m["value"]))
    out["max_abs_delta_beta_all-stable_over_ci_half_fp64"] = max(
        abs(p["delta_beta"]["all-stable"][L_COUNTS]) / half64[p["model"], p["layer"]]
        for p in demo)
    out["max_abs_mle_fp64_minus_fp32"] = max(
        abs(fp64[key][f] - fp32[key][f]) for key in fp64
        for f in ("mle_beta_all_stable", "mle_beta_symmetry_removed"))
    L = max(rand["lengths"])
    out["random_gap_fp64"] = (rand["beta"]["all-stable"][L][0]
                              - rand["beta"]["symmetry-removed"][L][0])
    return out


def main() -> None:
    _need(DEMO_REPORT, "run `make precision-docs` (it sweeps configs/demo-precision.yaml first)")
    _need(RANDOM_STORE, "run `make precision-docs` (it sweeps configs/precision-random-mamba.yaml)")
    fits = json.loads(Path(DEMO_REPORT).read_text())
    demo = [precision_row(DEMO_STORE, arch, arch, ckpt, layer, fits["settings"]["lengths"])
            for arch, ckpt in (("mamba", "tiny-mamba-bytes"), ("neox", "tiny-neox-bytes"))
            for layer in (1, 2)]
    st = open_store(RANDOM_STORE, "mamba-float32")
    rand = precision_row(RANDOM_STORE, "mamba", "random-mamba", "random Mamba-370M shape", 1,
                         store_settings(st).lengths)
    rand["inputs"] = st.inputs
    counts = counts_rows(fits)
    doc = {"made_by": "make precision-docs (benchmarks/precision_demo.py)",
           "configs": ["configs/demo-precision.yaml", "configs/precision-random-mamba.yaml"],
           "window": fits["window"], "level": fits["settings"]["level"],
           "resolved_max_rel_err": RESOLVED_MAX, "about": ABOUT, "counts": counts,
           "precision": demo + [rand], "summary": summary(counts, demo, rand, fits["window"][0])}
    OUT.write_text(json.dumps(doc, indent=1, default=_plain) + "\n")
    for p in doc["precision"]:
        print(f"{p['checkpoint']}, layer {p['layer']}: {p['matched_pairs']:,} matched "
              f"({p['tokens']} tokens), fp32 unresolved below {p['unresolved_below']:.1e}")
    print(f"wrote {OUT}")


def _plain(x):
    return x.item() if isinstance(x, np.generic) else str(x)


if __name__ == "__main__":
    if sys.argv[1:] == ["checkpoint"]:
        make_checkpoint()
    else:
        main()
