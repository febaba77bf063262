"""Spectral observables of one store: densities on the global bins, complex spectra, K(t).

Densities are normalised per mode: ρ(λ) = counts / (N · Δλ), N = every counted mode,
the under/overflow columns included (a rate beyond the bins is never dropped silently: the
figures count it), so ∫ρ dλ over the bins = 1 − (outside)/N. Collective spectra carry the mode
count they were made with (`modes`, see analysis.spectrum.rates). Prefix lengths L select tokens t < L of
one long sweep: by the causal block-triangular structure, eig of the length-L sequence
Jacobian is exactly the union of eig(J_tt) for t < L.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import exp1

from analysis._plot import axes_or_new, sweep_colors
from analysis.spectrum.rates import (EDGES, N_BINS, check_modes, classify, classify_rows, histogram,
                                     marginal_threshold)
from sweep.format.settings import DEFAULT_MODES, MODES

LAMBDA = "relaxation rate λ (per block, Δs = 1)"


@dataclass
class Spectrum:
    """A rate (or Δ) distribution on the global log bins. `counts` has under/overflow columns."""
    counts: np.ndarray
    label: str = ""
    xlabel: str = LAMBDA
    special: dict = field(default_factory=dict)   # marginal/unstable/zero/nonfinite/tokens
    modes: str | None = None      # mode count of a collective spectrum; None for λ_A, λ_eff, Δ

    @property
    def in_range(self) -> np.ndarray:
        return np.asarray(self.counts[1:N_BINS + 1], np.float64)

    @property
    def underflow(self) -> int:
        """Counted rates below the first edge (1e-17)."""
        return int(self.counts[0])

    @property
    def overflow(self) -> int:
        """Counted rates at or above the last edge (1e8)."""
        return int(self.counts[N_BINS + 1])

    @property
    def n_modes(self) -> int:
        """Every counted mode, under/overflow included (the normalisation)."""
        return int(np.asarray(self.counts).sum())

    @property
    def density(self) -> np.ndarray:
        """(N_BINS,) ρ(λ) per bin = counts / (n_modes · Δλ): under/overflow stay in n_modes."""
        return self.in_range / max(self.n_modes, 1) / np.diff(EDGES)

    def outside_note(self) -> str:
        """'' or a count of the modes beyond the bins, for a figure to show."""
        if not (self.underflow or self.overflow):
            return ""
        return (f"outside the bins (counted in N): {self.underflow:,} < {EDGES[0]:.0e}, "
                f"{self.overflow:,} ≥ {EDGES[-1]:.0e}")

    @property
    def centers(self) -> np.ndarray:
        return np.sqrt(EDGES[1:] * EDGES[:-1])

    def support(self):
        nz = np.nonzero(self.in_range)[0]
        return (EDGES[nz[0]], EDGES[nz[-1] + 1]) if len(nz) else (np.nan, np.nan)

    def plot(self, ax=None, view="log", color=None, label=None, ylabel="ρ(λ)"):
        ax = axes_or_new(ax)
        rho, c = self.density, self.centers
        ok = rho > 0
        label = (label or self.label) + (f" [{self.modes}]" if self.modes else "")
        if view == "log":
            ax.loglog(c[ok], rho[ok], ".-", ms=3, color=color, lw=1.0, label=label)
        else:   # linear view: the bulk of the spectrum, up to its 99th percentile
            cum = np.cumsum(self.in_range) / max(self.n_modes, 1)
            hi = EDGES[min(np.searchsorted(cum, 0.99) + 1, N_BINS)]
            lin_edges = np.linspace(0, hi, 60)
            ax.stairs(_rebin_linear(self, lin_edges), lin_edges, color=color,
                      label=label, fill=color is None, alpha=0.8)
        ax.set_xlabel(self.xlabel)
        ax.set_ylabel(ylabel)
        return ax


def _rebin_linear(sp: Spectrum, lin_edges):
    """Density on linear bins from the log-bin counts (counts split by overlap length)."""
    lo, hi = EDGES[:-1], EDGES[1:]
    out = np.zeros(len(lin_edges) - 1)
    for j, (a, b) in enumerate(zip(lin_edges[:-1], lin_edges[1:])):
        overlap = np.clip(np.minimum(hi, b) - np.maximum(lo, a), 0, None) / (hi - lo)
        out[j] = (sp.in_range * overlap).sum()
    return out / max(sp.n_modes, 1) / np.diff(lin_edges)


@dataclass
class SpectrumFamily:
    """Spectra of one sweep (sequence length, depth) overlaid in viridis order."""
    spectra: list
    values: list
    name: str = "L"

    def plot(self, ax=None, view="log", ylabel="ρ(λ)"):
        ax = axes_or_new(ax)
        for sp, v, c in zip(self.spectra, self.values, sweep_colors(len(self.spectra))):
            sp.plot(ax, view=view, color=c, label=f"{self.name} = {v}", ylabel=ylabel)
        ax.legend(fontsize=7, ncol=2 if len(self.spectra) > 6 else 1)
        notes = [f"{self.name} = {v}: {sp.outside_note()}" for sp, v in zip(self.spectra, self.values)
                 if sp.outside_note()]
        if notes:
            ax.text(0.02, 0.02, "\n".join(notes[-4:]), transform=ax.transAxes, fontsize=6,
                    va="bottom", color="C3")
        return ax

    @property
    def outside(self) -> dict:
        """{value: (underflow, overflow)} for every member with rates beyond the bins."""
        return {v: (sp.underflow, sp.overflow) for sp, v in zip(self.spectra, self.values)
                if sp.underflow or sp.overflow}


# ----------------------------------------------------------------------------- collective
def tdos(agg, layer, L=None, seqs=None, modes=DEFAULT_MODES) -> Spectrum:
    """ρ_block(λ) of tokens t < L (all sequences by default) under mode count `modes`."""
    return Spectrum(agg.hist(layer, L, "block", seqs, modes), label=f"layer {layer}",
                    special=agg.special(layer, L, modes), modes=modes)


def tdos_from_rates(rates, label="", modes=None) -> Spectrum:
    r = np.asarray(rates, np.float64)
    return Spectrum(histogram(r[np.isfinite(r) & (r > 0)]), label=label, modes=modes)


def tdos_vs_length(agg, layer, lengths, modes=DEFAULT_MODES) -> SpectrumFamily:
    return SpectrumFamily([tdos(agg, layer, L, modes=modes) for L in lengths], list(lengths), "L")


def tdos_vs_depth(agg, layers, L, modes=DEFAULT_MODES) -> SpectrumFamily:
    return SpectrumFamily([tdos(agg, l, L, modes=modes) for l in layers], list(layers), "layer")


def block_rates(store, layer, L=None, seqs=None, modes=DEFAULT_MODES):
    """Stable collective rates λ = −ln|ζ| of tokens t < L (raw, from the store; all sequences
    by default) under mode count `modes`, with the class counts (`rates.ModeClasses`).

    "all-stable" (default, the paper's): every 0 < |ζ| < 1. "symmetry-removed": also drops
    each token's norm-invariant-direction modes and |λ| < the dtype's marginal threshold.
    """
    return block_classes(store, layer, L, seqs)[check_modes(modes)]


def block_classes(store, layer, L=None, seqs=None, skip=0) -> dict:
    """{modes: ModeClasses} for both mode counts from one read of the store; token positions
    t < skip are left out (analysis.skip_positions)."""
    seqs = range(store.n_seqs) if seqs is None else seqs
    zeta = np.concatenate([store.eigenvalues(layer, s)[skip:L] for s in seqs])  # (T, d)
    dirs = [store.norm_directions(layer, s) for s in seqs]
    rho = np.concatenate([r[skip:L] for r, _ in dirs])                           # (T, 2)
    resid = np.concatenate([e[skip:L] for _, e in dirs])                         # (T, 2)
    thr = marginal_threshold(store.dtype)
    return {m: classify(zeta, thr, rho, resid, modes=m) for m in MODES}


def token_rate_rows(store, layer, L=None, skip=0) -> dict:
    """{modes: (rates (N, d) float64, NaN where a mode is not stable under that count;
    seq (N,) the sequence of each row)} for the finished tokens skip <= t < L of every
    sequence, in token order: the per-token data a resampling of tokens needs."""
    out = {m: ([], []) for m in MODES}
    thr = marginal_threshold(store.dtype)
    for s in range(store.n_seqs):
        zeta = store.eigenvalues(layer, s)[skip:L]                               # (T, d)
        rho, resid = (a[skip:L] for a in store.norm_directions(layer, s))        # (T, 2)
        done = np.isfinite(zeta).any(1)                                          # (T,)
        for m, (stable, _) in classify_rows(zeta[done], thr, rho[done], resid[done]).items():
            out[m][0].append(stable)
            out[m][1].append(np.full(int(done.sum()), s))
    d = store.d_model
    return {m: (np.concatenate(r) if r else np.zeros((0, d)), np.concatenate(q).astype(np.int64)
                if q else np.zeros(0, np.int64)) for m, (r, q) in out.items()}


@dataclass
class ComplexSpectrum:
    """Eigenvalues ζ of J_tt pooled over tokens: plane density, |ζ|, phase θ = arg ζ."""
    zeta: np.ndarray = field(repr=False)
    label: str = ""

    def plot(self, ax=None, kind="plane"):
        ax = axes_or_new(ax)
        z = self.zeta
        if kind in ("plane", "zoom"):
            lim = (-1.6, 1.6, -1.6, 1.6) if kind == "plane" else _zoom_box(z)
            inside = (z.real > lim[0]) & (z.real < lim[1]) & (z.imag > lim[2]) & (z.imag < lim[3])
            h = ax.hexbin(z.real[inside], z.imag[inside], gridsize=120, bins="log", cmap="viridis",
                          mincnt=1, extent=lim)
            ax.figure.colorbar(h, ax=ax, label="modes per cell")
            phi = np.linspace(0, 2 * np.pi, 400)
            ax.plot(np.cos(phi), np.sin(phi), "w--" if kind == "plane" else "k--", lw=0.8)
            ax.set_xlim(lim[:2]), ax.set_ylim(lim[2:])
            ax.set_xlabel("Re ζ"), ax.set_ylabel("Im ζ")
            if kind == "plane":
                ax.set_aspect("equal")
        elif kind == "modulus":
            ax.hist(np.abs(z), bins=120, color="C0", log=True)
            ax.axvline(1.0, color="k", ls="--", lw=0.8)
            ax.set_xlabel("|ζ|"), ax.set_ylabel("modes")
        elif kind == "phase":
            ax.hist(np.angle(z), bins=120, range=(-np.pi, np.pi), color="C1", log=True)
            ax.set_xlabel("phase θ = arg ζ (rad)"), ax.set_ylabel("modes")
        elif kind == "joint":
            lam = -np.log(np.abs(z[(np.abs(z) > 0) & (np.abs(z) < 1)]).astype(np.float64))
            th = np.angle(z[(np.abs(z) > 0) & (np.abs(z) < 1)])
            ok = lam > 0
            h = ax.hexbin(np.log10(lam[ok]), th[ok], gridsize=80, bins="log", cmap="viridis", mincnt=1)
            ax.figure.colorbar(h, ax=ax, label="modes per cell")
            ax.set_xlabel("log10 λ"), ax.set_ylabel("θ (rad)")
        else:
            raise ValueError(f"kind must be plane, zoom, modulus, phase or joint, not {kind!r}")
        return ax


def _zoom_box(z):
    """A window around ζ = 1, where the slow modes live."""
    return (0.9, 1.02, -0.06, 0.06)


def complex_spectrum(store, layer, L=None, seqs=None) -> ComplexSpectrum:
    seqs = range(store.n_seqs) if seqs is None else seqs
    z = np.concatenate([store.eigenvalues(layer, s)[:L].ravel() for s in seqs])
    return ComplexSpectrum(z[np.isfinite(z)], label=f"layer {layer}")


# ----------------------------------------------------------------------------- kernels
@dataclass
class MemoryKernel:
    """K(t) = ⟨e^{−λt}⟩ over stable modes (the Laplace transform of ρ)."""
    t: np.ndarray
    K: np.ndarray
    n_modes: int
    beta: float | None = None      # draw t^-(1+β) beside the t^-1 reference when given
    label: str = "K(t)"
    beta_name: str = ""            # which β that is: estimator, mode count, GOF (the legend says it)

    def plot(self, ax=None, color="C0"):
        ax = axes_or_new(ax)
        ok = self.K > 0
        ax.loglog(self.t[ok], self.K[ok], "-", color=color, label=self.label)
        i = np.searchsorted(self.t, np.sqrt(self.t[0] * self.t[-1]))
        k0, t0 = self.K[i], self.t[i]
        ax.loglog(self.t, k0 * t0 / self.t, "k--", lw=0.8, label=r"$t^{-1}$ reference")
        if self.beta is not None and np.isfinite(self.beta):
            ax.loglog(self.t, k0 * (self.t / t0) ** -(1 + self.beta), ":", color="C3",
                      label=rf"$t^{{-(1+\beta)}}$, β = {self.beta:+.3f}"
                      + (f"\n{self.beta_name}" if self.beta_name else ""))
        ax.set_ylim(max(self.K[ok].min(), 1e-8) if ok.any() else 1e-8, 1.5)
        ax.set_xlabel("t (blocks)" if "A" not in self.label else "t (SSM time units)")
        ax.set_ylabel("K(t)")
        # K(t) falls from 1 at the left: the lower left corner is empty, and the legend stays
        # inside the frame there
        ax.legend(fontsize=7, loc="lower left")
        return ax


def default_times():
    return np.geomspace(1e-1, 1e8, 120)


def memory_kernel(rates, t=None, beta=None, label="K(t)", chunk=200_000) -> MemoryKernel:
    """Exact mean of exp(−λ t) over the given positive rates."""
    t = default_times() if t is None else np.asarray(t, np.float64)
    r = np.asarray(rates, np.float64)
    r = r[np.isfinite(r) & (r > 0)]
    K = np.zeros_like(t)
    for i in range(0, len(r), chunk):
        K += np.exp(-np.outer(t, r[i:i + chunk])).sum(1)
    return MemoryKernel(t, K / max(len(r), 1), len(r), beta, label)


def memory_kernel_from_hist(sp: Spectrum, t=None, beta=None, label="K(t)",
                            beta_name="") -> MemoryKernel:
    """K(t) from binned counts, treating the density as log-uniform inside each bin:
    ⟨e^{−λt}⟩_bin = (E1(a t) − E1(b t)) / ln(b/a)  (exact for that within-bin density).
    Rates below the bins (< 1e-17) contribute 1 and rates above (≥ 1e8) 0 at every t used."""
    t = default_times() if t is None else np.asarray(t, np.float64)
    a, b = EDGES[:-1], EDGES[1:]
    n = max(sp.n_modes, 1)
    w = sp.in_range / n
    nz = w > 0
    tt = t[:, None]
    per_bin = (exp1(a[nz] * tt) - exp1(b[nz] * tt)) / np.log(b[nz] / a[nz])
    return MemoryKernel(t, per_bin @ w[nz] + sp.underflow / n, sp.n_modes, beta, label, beta_name)
