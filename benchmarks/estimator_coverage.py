"""Coverage and bias of the β estimators on the synthetic laws tests/ uses (docs/analysis.md,
"The primary estimator"). Run: PYTHONPATH=$PWD .venv/bin/python benchmarks/estimator_coverage.py [N_SETS]

Law A (tests/test_bootstrap_coverage.py): tokens of 64 rates from ρ ∝ λ^(s_t − 1) on (0, 0.06],
s_t drifting as an AR(1) (φ 0.8), 2 sequences × 512 tokens; population β = the grid fit of
the expected N(<λ). Law B (tests/synthetic_store.py token_spectrum): 24 power-law IR modes
β = −0.2 below 0.1 per token plus a UV bulk, a marginal and an unstable mode, 2 × 64 tokens.
Law C: law A without drift (β = −0.2 exactly) and no modes below λ = 1e-5, a decade under
the window: the law holds inside the window, not below it. The cumulative fit counts the
modes below the window (N(<λ) is cumulative), the in-window MLE does not.
Each estimator's 90 % interval resamples the same units (resampling.py); n_boot 200.
"""
import sys

import numpy as np

sys.path.insert(0, "tests")
from synthetic_store import token_spectrum                                     # noqa: E402
from test_bootstrap_coverage import WINDOW, drifting_spectra, population_beta  # noqa: E402

from analysis.fit.bootstrap import bootstrap_ir_from_hists                    # noqa: E402
from analysis.fit.window import bootstrap_mle                                 # noqa: E402
from analysis.spectrum.rates import histogram_rows                            # noqa: E402


def law_a(rng):
    return drifting_spectra(rng)


def law_b(rng):
    z = np.stack([token_spectrum(rng, 48, -0.2, 24, "float64") for _ in range(128)])
    lam = -np.log(np.abs(z))
    lam[~((np.abs(z) > 0) & (np.abs(z) < 1))] = np.nan
    return lam, np.repeat([0, 1], 64)


def law_c(rng):
    lam, seq = drifting_spectra(rng, sigma=0.0)
    return np.where(lam < 1e-5, np.nan, lam), seq


def run(law, truth, n_sets, seed=0):
    rng = np.random.default_rng(seed)
    out = {"cumulative": [], "mle": []}
    for i in range(n_sets):
        lam, seq = law(rng)
        h = histogram_rows(lam)                                # NaN entries skipped
        b = bootstrap_ir_from_hists(h, WINDOW, 200, 0.9, seed=i, seq=seq)
        m = bootstrap_mle(lam, seq, WINDOW, 200, 0.9, seed=i)
        out["cumulative"].append((b.beta, b.lo <= truth <= b.hi))
        out["mle"].append((m.beta, m.lo <= truth <= m.hi))
    for k, v in out.items():
        x = np.array(v, float)
        print(f"  {k:10s} bias {x[:, 0].mean() - truth:+.4f} (se {x[:, 0].std() / np.sqrt(len(x)):.4f}), "
              f"sd {x[:, 0].std():.4f}, coverage of 90 %: {x[:, 1].mean():.3f} ({len(x)} sets)")


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    print(f"law A: drifting power law, population β = {population_beta():+.4f}")
    run(law_a, population_beta(), n)
    print("law B: synthetic_store token_spectrum, β = -0.2")
    run(law_b, -0.2, n)
    print("law C: β = -0.2 inside the window, no modes below 1e-5")
    run(law_c, -0.2, n)
