"""Eigenvalues → relaxation rates, mode classes, and the one global set of log bins.

Every histogram in tdos uses the same edges (`EDGES`), so histograms of different blocks,
sequences and runs add exactly, and a cumulative count N(<λ) evaluated on an edge is exact.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BINS_PER_DECADE = 20
LOG10_LO, LOG10_HI = -12, 4
# Edge k is 10**(LOG10_LO + k/20); integer exponents keep the edges reproducible bit for bit.
EDGES = 10.0 ** (LOG10_LO + np.arange((LOG10_HI - LOG10_LO) * BINS_PER_DECADE + 1) / BINS_PER_DECADE)
N_BINS = len(EDGES) - 1
# Histogram columns: 0 = below EDGES[0], 1..N_BINS = [EDGES[k-1], EDGES[k]), N_BINS+1 = >= EDGES[-1].
N_COLS = N_BINS + 2

# Mode classes counted beside the stable-rate histogram.
CLASSES = ("marginal", "unstable", "zero", "nonfinite")

# |λ| below this is "numerically marginal": |ζ| = 1 up to rounding. Every J_tt of a block that
# starts with RMSNorm/LayerNorm has an exact ζ = 1 along the scale direction h (the norm is
# scale invariant, so J h = h). fp32: stored in complex64, that eigenvalue comes back as
# |ζ| = 1 ± δ with δ ≈ 1e-12…1e-9 (float32 spacing at 1 is 6e-8; a deviation below ~2% of
# it was not resolved by an fp32 Jacobian, it is rounding of |ζ| = 1). fp64: the solver
# places it within ~eps64·κ·||J|| ≈ 1e-15…1e-12 of 1. Physical slow modes in the paper reach
# ≈1e-7 (fp32) and ≈1e-8 (fp64), so both thresholds sit two decades below the physical
# tail, at least two decades above the rounding, and six below the fit window (1e-4).
# The report prints marginal modes per token: ≈1 for norm-led blocks confirms the threshold
# catches exactly the scale direction (more: it eats real slow modes; fewer: it leaks).
MARGINAL_THRESHOLD = {"float32": 1e-9, "float64": 1e-10}


def marginal_threshold(dtype: str) -> float:
    return MARGINAL_THRESHOLD.get(str(dtype).replace("complex64", "float32")
                                  .replace("complex128", "float64"), 1e-9)


def rates_of(zeta) -> np.ndarray:
    """λ = −ln|ζ| in float64 (|ζ| from the float64 components: |ζ| in float32 could not
    resolve λ below 6e-8)."""
    z = np.asarray(zeta)
    mod = np.hypot(z.real.astype(np.float64), z.imag.astype(np.float64))
    with np.errstate(divide="ignore"):
        return -np.log(mod)


@dataclass
class ModeClasses:
    """Stable rates (λ ≥ threshold, |ζ|>0) and counts of everything else."""
    stable: np.ndarray          # float64 rates of stable, non-marginal modes
    marginal: int
    unstable: int
    zero: int
    nonfinite: int

    def counts(self) -> np.ndarray:
        return np.array([self.marginal, self.unstable, self.zero, self.nonfinite], np.int64)


def classify(zeta, threshold) -> ModeClasses:
    """Split eigenvalues ζ (any shape) into stable rates and counted special classes."""
    z = np.asarray(zeta).ravel()
    finite = np.isfinite(z)
    lam = rates_of(z[finite])
    zero = np.isinf(lam)                       # |ζ| == 0 exactly: λ = +inf
    lam_f = lam[~zero]
    marginal = np.abs(lam_f) < threshold
    unstable = lam_f <= -threshold
    return ModeClasses(stable=lam_f[~marginal & ~unstable], marginal=int(marginal.sum()),
                       unstable=int(unstable.sum()), zero=int(zero.sum()),
                       nonfinite=int((~finite).sum()))


def stable_rates(zeta, threshold) -> np.ndarray:
    return classify(zeta, threshold).stable


def bin_index(rates) -> np.ndarray:
    """Histogram column of each positive rate (see N_COLS)."""
    return np.searchsorted(EDGES, np.asarray(rates, np.float64), side="right")


def histogram(rates) -> np.ndarray:
    """(N_COLS,) int64 counts of `rates` on the global edges, under/overflow included."""
    return np.bincount(bin_index(rates), minlength=N_COLS).astype(np.int64)


def histogram_rows(rates_2d) -> np.ndarray:
    """(T, N_COLS) per-row histograms of a (T, n) rate array; NaN entries are skipped."""
    r = np.asarray(rates_2d, np.float64)
    T = r.shape[0]
    ok = np.isfinite(r)
    idx = bin_index(np.where(ok, r, 1.0)) + N_COLS * np.arange(T)[:, None]
    return np.bincount(idx[ok], minlength=T * N_COLS).reshape(T, N_COLS).astype(np.int64)


def cumulative_at_edges(hist) -> np.ndarray:
    """(N_BINS+1,) N(<EDGES[k]) from a histogram (last axis = columns)."""
    return np.cumsum(np.asarray(hist)[..., :-1], axis=-1)


def grid_indices(window) -> np.ndarray:
    """Indices k of the global edges with lo <= EDGES[k] <= hi (the fit's evaluation points)."""
    lo, hi = window
    tol = 1e-9
    return np.nonzero((EDGES >= lo * (1 - tol)) & (EDGES <= hi * (1 + tol)))[0]


def centers() -> np.ndarray:
    return np.sqrt(EDGES[:-1] * EDGES[1:])
