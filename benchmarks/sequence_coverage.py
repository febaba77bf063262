"""Coverage of β's 90 % interval when sequences differ: which resampling unit carries the
between-sequence variance (docs/analysis.md, "Uncertainty"; resampling.py's rule).
Run: PYTHONPATH=$PWD .venv/bin/python benchmarks/sequence_coverage.py [N_SETS]

Law (tests/test_bootstrap_coverage.py, `sequence_spectra`): S sequences × 128 tokens of 64
rates from ρ ∝ λ^(s_t − 1), s_t = 0.8 + 0.12·a_t + τ·u_q, a_t an AR(1) (φ 0.8) along each
sequence and u_q ~ N(0, 1) one per sequence: each sequence has its own exponent. The
population β is the grid fit of the expected N(<λ) over both (their sum is Gaussian, sd
√(0.12² + τ²)). Units compared, each on the same data sets (n_boot 300 where drawn):
circular blocks within sequences; whole sequences drawn with replacement, plain percentile;
the same, stretched for variance bias and t (resampling.py's bootstrap interval); the
jackknife over sequences with t(S − 1).
"""
import sys

import numpy as np

sys.path.insert(0, "tests")
from test_bootstrap_coverage import WINDOW, population_beta, sequence_spectra, token_hists  # noqa: E402

from analysis.fit.bootstrap import bootstrap_ir_from_hists                  # noqa: E402

UNITS = ("blocks", "sequences, plain percentile", "sequences, stretched t", "jackknife, t(S−1)")


def covers(h, seq, truth, i):
    """{unit: covers the truth} of one data set."""
    out = {}
    for name, unit in (("blocks", "blocks"), ("sequences, stretched t", "sequences"),
                       ("jackknife, t(S−1)", "jackknife")):
        b = bootstrap_ir_from_hists(h, WINDOW, 300, 0.9, seed=i, seq=seq, unit=unit)
        out[name] = b.covers(truth)
        if unit == "sequences":
            lo, hi = np.quantile(b.betas[np.isfinite(b.betas)], [0.05, 0.95])
            out["sequences, plain percentile"] = bool(lo <= truth <= hi)
    return out


def run(n_sets, n_seq, tau, seed=0):
    rng = np.random.default_rng(seed)
    truth = population_beta(np.hypot(0.12, tau))
    hits = {u: 0 for u in UNITS}
    for i in range(n_sets):
        rates, seq = sequence_spectra(rng, n_seq, tau)
        for u, c in covers(token_hists(rates), seq, truth, i).items():
            hits[u] += c
    print(f"S = {n_seq:2d}, τ = {tau:g}: " + ", ".join(f"{u} {hits[u] / n_sets:.3f}" for u in UNITS)
          + f" ({n_sets} sets)")


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    for s in (2, 4, 8, 20):
        run(n, s, 0.1)
    run(n, 8, 0.0)
