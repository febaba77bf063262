"""Eigenvalues → relaxation rates, mode classes (two named mode counts), and the one global
set of log bins.

Every histogram in tdos uses the same edges (`EDGES`), so histograms of different blocks,
sequences and runs add exactly, and a cumulative count N(<λ) evaluated on an edge is exact.

Two mode counts (`MODES`), carried side by side through every TDOS, count, fit and table:

- "all-stable": the paper's count. Every eigenvalue with 0 < |ζ| < 1 is a stable mode
  (λ = −ln|ζ| > 0); nothing is removed.
- "symmetry-removed": additionally drops, per token, the eigenvalue along each of the
  norm's invariant directions (the "scale" class below) and every |λ| below the marginal
  threshold (|ζ| = 1 to rounding).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sweep.format import dtypes
from sweep.format.settings import MODES


BINS_PER_DECADE = 20
# The bins cover every rate tdos meets: fp64 rounding of ζ = 1 gives λ ≈ 1e-16 (counted under
# all-stable), and intrinsic/effective rates reach beyond 1e4 (the paper's Figs 2, 4). Rates
# outside still land in the under/overflow columns, are counted and enter every normalisation.
LOG10_LO, LOG10_HI = -17, 8
# Edge k is 10**((20·LOG10_LO + k)/20): an exact rational exponent, so an edge at a given
# exponent is the same float whatever LOG10_LO is (fits on grid edges stay bit-reproducible).
EDGES = 10.0 ** ((LOG10_LO * BINS_PER_DECADE + np.arange((LOG10_HI - LOG10_LO) * BINS_PER_DECADE + 1))
                 / BINS_PER_DECADE)
N_BINS = len(EDGES) - 1
# Histogram columns: 0 = below EDGES[0], 1..N_BINS = [EDGES[k-1], EDGES[k]), N_BINS+1 = >= EDGES[-1].
N_COLS = N_BINS + 2

# Mode classes counted beside the stable-rate histogram. "scale" is appended last so the
# column index of the older four is unchanged.
CLASSES = ("marginal", "unstable", "zero", "nonfinite", "scale")

# |λ| below the dtype's marginal floor (`marginal_threshold`, from sweep/format/dtypes.py) is
# "numerically marginal": |ζ| = 1 up to rounding. This rule does NOT catch the norm's scale
# mode: a block entered through one norm (h + mixer(norm h)) has J h = h + O(eps/ms(h)), an
# eigenvalue at |ζ| = 1 ± 1e-7…1e-2 (demo Mamba), either side of the circle: as deep-IR or
# fit-window "stable" modes and as "unstable" ones. That mode is found by its eigenvector
# (the "scale" class below) wherever the store holds ρ_t, r_t.

# The scale mode: per token, the eigenvalue nearest ρ_t = h_tᵀJh_t/h_tᵀh_t whenever the
# relative residual r_t = ‖Jh_t − ρ_t h_t‖/‖h_t‖ is at most this. ρ_t is then an exact
# eigenvalue of J + E with ‖E‖ = r_t, so Bauer–Fike puts an eigenvalue of J within κ(V)·r_t
# of ρ_t, and for eigenvalue gaps of order 1, sin∠(h_t, eigenvector) ≲ r_t: h_t lies within
# ~3° of an eigen-direction. Measured r_t: norm-led blocks (Mamba, parallel-residual NeoX;
# the trained demo models and the random test ones) 2e-7…2.1e-2, the eps term growing as
# ms(h) shrinks; sequential blocks (GPT-2, LLaMA test models) 0.12…0.44; and the NeoX demo's
# layer 0, whose embeddings have ms(h) ≈ 1e-3 so that eps = 1e-5 breaks the norm's scale
# invariance, 0.25…1.1 (no scale mode there). 0.05 sits at the geometric middle of the
# gap 2.1e-2…0.12: a factor ≥ 2.4 from both sides (a narrow gap; check r_t of new models).
# "scale" means the norm's invariant directions: the scale direction h_t (RMSNorm and
# LayerNorm) and, for LayerNorm, also the shift direction u = 𝟙/√d (mean subtraction makes
# LN(h + c·𝟙) = LN(h) exactly, eps included). Every pre-LN LayerNorm block, parallel
# (h + attn(LN1 h) + mlp(LN2 h), GPT-NeoX) or sequential (h1 = h + attn(LN1 h),
# h1 + mlp(LN2 h1), GPT-2: the shift passes through h1 unchanged), therefore has J𝟙 = 𝟙
# exactly: a ζ = 1 per token (fp32: λ ≈ 6e-8, a fake deep-IR stable mode), the second one
# for parallel NeoX. The sweep stores ρ, r along u as well; the same threshold applies, and
# the eigenvalue taken for it is the nearest one not already taken by h_t. RMSNorm blocks
# (Mamba, LLaMA) have a large r along u.
SCALE_RESIDUAL_MAX = 0.05


def check_modes(modes: str) -> str:
    """`modes` itself when it names a mode count; a ValueError naming both otherwise."""
    if modes not in MODES:
        raise ValueError(f"modes must be one of {', '.join(MODES)}, not {modes!r}")
    return modes


def mode_key(modes: str) -> str:
    """"all-stable" → "all_stable": the suffix of array names and table columns."""
    return check_modes(modes).replace("-", "_")


FP64_ONLY = "fp64-only"     # the label of an all-stable β whose fp32 floor no measurement backs


def resolution_floor(dtype, measured=None) -> tuple:
    """(floor, source) of the all-stable count of a store in `dtype` at one layer
    (studies/tables.py, "Resolution before counting"): none in fp64; in fp32 the precision
    study's `measured` (λ*, how) when there is one, else the dtype table's marginal floor,
    labelled FP64_ONLY."""
    if dtype != "float32":
        return 0.0, ""
    if measured is not None and np.isfinite(measured[0]):
        return float(measured[0]), f"fp32 resolution λ* = {measured[0]:.2g} {measured[1]}"
    thr = marginal_threshold(dtype)
    return thr, (f"dtype table's marginal floor {thr:g} (sweep/format/dtypes.py; no fp64 twin "
                 f"measured this layer's resolution, so this β is {FP64_ONLY} for paper comparisons)")


def floor_edge(floor) -> tuple:
    """(λ, column): the first global bin edge ≥ floor and the histogram column just below it
    (columns 0..column hold only rates < λ); (0, −1) for no floor."""
    if floor <= 0:
        return 0.0, -1
    j = int(np.searchsorted(EDGES, floor, "left"))
    return float(EDGES[j]), j


def marginal_threshold(dtype) -> float:
    """The marginal floor of a compute dtype or its complex partner (a store's eigenvalues)."""
    return dtypes.of(dtype).marginal


def rates_of(zeta) -> np.ndarray:
    """λ = −ln|ζ| in float64 (|ζ| from the float64 components: |ζ| in float32 could not
    resolve λ below 6e-8)."""
    z = np.asarray(zeta)
    mod = np.hypot(z.real.astype(np.float64), z.imag.astype(np.float64))
    with np.errstate(divide="ignore"):
        return -np.log(mod)


@dataclass
class ModeClasses:
    """Stable rates under one mode count and counts of everything else.

    symmetry-removed: stable = λ ≥ threshold, |ζ| > 0, not the scale mode; `removed` holds
    the rates λ > 0 of the scale and marginal modes (stable modes that all-stable counts).
    all-stable: stable = every 0 < |ζ| < 1; unstable counts |ζ| ≥ 1; marginal = scale = 0.
    """
    stable: np.ndarray          # float64 rates of the stable modes of this count
    marginal: int
    unstable: int
    zero: int
    nonfinite: int
    scale: int = 0
    modes: str = "symmetry-removed"
    removed: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)

    def counts(self) -> np.ndarray:
        return np.array([getattr(self, c) for c in CLASSES], np.int64)


def scale_mask(zeta, rho, resid) -> np.ndarray:
    """(T, d) bool: per token t and norm-invariant direction k, the eigenvalue nearest ρ_tk
    among those not yet taken, where r_tk ≤ SCALE_RESIDUAL_MAX.

    zeta (T, d) complex; rho, resid (T,) (the scale direction h_t alone) or (T, K) (K
    directions in order: column 0 the scale direction h_t, column 1 the shift direction 𝟙/√d
    of LayerNorm). Directions are matched in column order, each to a distinct eigenvalue, so
    two exact ζ = 1 (scale and shift of a parallel-residual LayerNorm block) remove two
    modes. NaN ρ/r (unwritten, or a store without the arrays) select nothing, so such tokens
    fall back to the value rule alone.
    """
    z = np.asarray(zeta).astype(np.complex128)                            # (T, d)
    rho, resid = (np.asarray(a, np.float64) for a in (rho, resid))
    rho, resid = (a[:, None] if a.ndim == 1 else a for a in (rho, resid))   # (T, K)
    mask = np.zeros(z.shape, bool)
    for k in range(rho.shape[1]):
        with np.errstate(invalid="ignore"):
            dist = np.abs(z - rho[:, k, None])                            # (T, d)
            dist = np.where(np.isfinite(dist) & ~mask, dist, np.inf)
            found = (resid[:, k] <= SCALE_RESIDUAL_MAX) & np.isfinite(dist).any(1)
        rows = np.nonzero(found)[0]
        mask[rows, np.argmin(dist[rows], axis=1)] = True
    return mask


def mode_masks(zeta, threshold, rho=None, resid=None, scale=None) -> tuple[np.ndarray, dict]:
    """λ (zeta's shape; NaN where ζ is not finite) and one bool mask per class + "stable"
    (symmetry-removed) + "all_stable" (every 0 < |ζ| < 1).

    With rho/resid ((T,) or (T, K), see `scale_mask`), zeta is (T, d) and the scale mode —
    the norm's invariant directions — takes precedence over the value
    classes (its λ may be tiny, negative, or inside the fit window); without, no scale mode.
    threshold = 0 and no rho give the all-stable classes (unstable then means |ζ| ≥ 1).
    `scale` (zeta's shape, bool) gives the scale modes found already (a stack's, from its raw
    eigenvalues, when zeta holds the per-step moduli |ζ|^(1/s)) instead of rho/resid.
    """
    z = np.asarray(zeta)
    finite = np.isfinite(z)
    lam = np.where(finite, rates_of(np.where(finite, z, 1.0)), np.nan)
    zero = finite & np.isinf(lam)
    if scale is None:
        scale = np.zeros(z.shape, bool) if rho is None else scale_mask(z, rho, resid)
    scale = scale & finite & ~zero
    with np.errstate(invalid="ignore"):
        marginal = finite & (np.abs(lam) < threshold) & ~scale
        unstable = finite & (lam <= -threshold) & ~scale
    stable = finite & ~zero & ~scale & ~marginal & ~unstable
    with np.errstate(invalid="ignore"):
        all_stable = finite & ~zero & (lam > 0)             # 0 < |ζ| < 1 in float64
    return lam, {"marginal": marginal, "unstable": unstable, "zero": zero,
                 "nonfinite": ~finite, "scale": scale, "stable": stable, "all_stable": all_stable}


def _as_mode(lam, m, modes) -> dict:
    """The class masks of one mode count (all-stable: nothing removed, |ζ| ≥ 1 unstable)."""
    if check_modes(modes) == "symmetry-removed":
        return m
    none = np.zeros_like(m["stable"])
    finite = ~m["nonfinite"]
    return {"marginal": none, "scale": none, "zero": m["zero"], "nonfinite": m["nonfinite"],
            "unstable": finite & ~m["zero"] & ~m["all_stable"], "stable": m["all_stable"]}


def classify(zeta, threshold, rho=None, resid=None, modes="symmetry-removed") -> ModeClasses:
    """Split eigenvalues ζ (any shape; (T, d) with rho, resid (T,)) into the stable rates of
    mode count `modes` and counted special classes."""
    lam, m = mode_masks(zeta, threshold, rho, resid)
    c = _as_mode(lam, m, modes)
    removed = lam[m["all_stable"] & ~m["stable"]] if modes == "symmetry-removed" else np.zeros(0)
    return ModeClasses(stable=lam[c["stable"]], modes=modes, removed=removed,
                       **{k: int(c[k].sum()) for k in CLASSES})


def classify_rows(zeta, threshold, rho=None, resid=None, scale=None) -> dict:
    """(T, d) ζ → {modes: ((T, d) stable rates, NaN elsewhere; (T, len(CLASSES)) uint32
    class counts)} for both mode counts, from one pass (`scale`: see `mode_masks`)."""
    lam, m = mode_masks(zeta, threshold, rho, resid, scale)
    out = {}
    for modes in MODES:
        c = _as_mode(lam, m, modes)
        special = np.stack([c[k].sum(1) for k in CLASSES], 1).astype(np.uint32)
        out[modes] = (np.where(c["stable"], lam, np.nan), special)
    return out


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
