"""One config in two precisions (fp32 and fp64): eigenvalues matched token by token.

The eigenvalues of one J_tt come back from the solver in no particular order, and the two
precisions order them differently, so each token's two sets are paired by the assignment
that minimises the total distance |ζ_32 − ζ_64| (Hungarian matching,
scipy.optimize.linear_sum_assignment). Matching only within a token is exact bookkeeping:
both runs computed the same d × d matrix J_tt of the same input, once per precision.

From the pairs: the relative error |δλ|/λ = |λ_32 − λ_64|/λ_64 of every mode stable in
fp64, binned in λ_64; the rate below which fp32 is not resolved (median relative error in
a bin above `RESOLVED_MAX` = 10 %); and, per prefix length L and per mode count, β of
each precision and Δβ = β_64 − β_32.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linear_sum_assignment

from analysis._plot import axes_or_new
from analysis.fit.fits import WINDOW, fit_ir_exponent
from analysis.io.aggregate import aggregate
from analysis.io.store import open_store
from analysis.spectrum.observables import block_classes, tdos
from analysis.spectrum.rates import check_modes, rates_of
from analysis.studies.tables import default_lengths
from sweep.format.settings import DEFAULT_MODES, MODES

RESOLVED_MAX = 0.10          # a rate is resolved in fp32 when its relative error is at most this
BINS_PER_DECADE = 4          # coarse λ bins for the median relative error (enough pairs per bin)


def match_tokens(za, zb) -> np.ndarray:
    """(T, d) column index: zb[t, idx[t, k]] is the partner of za[t, k], per token t, from
    the assignment minimising Σ|za − zb| (Hungarian). Rows with a non-finite value: -1."""
    za, zb = (np.asarray(z).astype(np.complex128) for z in (za, zb))      # (T, d)
    idx = np.full(za.shape, -1, np.int64)
    for t in range(za.shape[0]):
        if not (np.isfinite(za[t]).all() and np.isfinite(zb[t]).all()):
            continue
        cost = np.abs(za[t][:, None] - zb[t][None, :])                     # (d, d)
        rows, cols = linear_sum_assignment(cost)
        idx[t, rows] = cols
    return idx


@dataclass
class MatchedRates:
    """Matched stable rates: λ of the reference (fp64) run and of the other (fp32) run."""
    lam_ref: np.ndarray = field(repr=False)      # (n,) float64, λ_64 > 0
    lam: np.ndarray = field(repr=False)          # (n,) float64, λ_32 of the partner (any sign)
    n_tokens: int = 0

    @property
    def rel_err(self) -> np.ndarray:
        return np.abs(self.lam - self.lam_ref) / self.lam_ref

    def binned(self, min_pairs=3):
        """(edges, median relative error per bin, pairs per bin) on BINS_PER_DECADE bins of λ_64."""
        lo, hi = np.floor(np.log10(self.lam_ref.min())), np.ceil(np.log10(self.lam_ref.max()))
        edges = 10.0 ** np.arange(lo, hi + 1e-9, 1.0 / BINS_PER_DECADE)
        k = np.searchsorted(edges, self.lam_ref, side="right") - 1
        err = self.rel_err
        med = np.full(len(edges) - 1, np.nan)
        n = np.bincount(k, minlength=len(edges))[: len(edges) - 1]
        for b in np.nonzero(n >= min_pairs)[0]:
            med[b] = np.median(err[k == b])
        return edges, med, n

    def unresolved_below(self, max_rel=RESOLVED_MAX) -> float:
        """The upper edge of the highest λ_64 bin whose median relative error exceeds
        `max_rel`: fp32 does not resolve rates below it (0.0 when every bin is resolved)."""
        if self.lam_ref.size == 0:
            return float("nan")
        edges, med, _ = self.binned()
        bad = np.nonzero(med > max_rel)[0]
        return float(edges[bad[-1] + 1]) if len(bad) else 0.0


def matched_rates(st_ref, st_other, layer, L=None) -> MatchedRates:
    """Match every token t < L of `layer` (all sequences) between two stores of one config."""
    lam_ref, lam = [], []
    n_tok = 0
    for s in range(st_ref.n_seqs):
        za, zb = st_ref.eigenvalues(layer, s)[:L], st_other.eigenvalues(layer, s)[:L]  # (T, d)
        T = min(len(za), len(zb))
        za, zb = za[:T], zb[:T]
        idx = match_tokens(za, zb)
        ok = idx >= 0
        n_tok += int(ok.all(1).sum())
        la = rates_of(np.where(ok, za, 1.0))                                 # (T, d) fp64
        lb = rates_of(np.take_along_axis(zb, np.where(ok, idx, 0), axis=1))
        keep = ok & (la > 0) & np.isfinite(la)
        lam_ref.append(la[keep])
        lam.append(lb[keep])
    return MatchedRates(np.concatenate(lam_ref), np.concatenate(lam), n_tok)


@dataclass
class PrecisionComparison:
    """One config in two precisions: matched rates, β per L and mode count, TDOS overlay."""
    names: tuple                 # (reference, other): reference is the higher precision
    dtypes: tuple
    layer: int
    lengths: list
    betas: dict                  # modes -> {L: (β_ref, β_other)}
    matched: MatchedRates
    spectra: tuple = ()          # TDOS of both at the longest L, mode count `modes`
    modes: str = DEFAULT_MODES
    window: tuple = WINDOW

    def delta_beta(self, modes=None) -> dict:
        """{L: β_ref − β_other} (fp64 − fp32) under `modes`."""
        return {L: a - b for L, (a, b) in self.betas[check_modes(modes or self.modes)].items()}

    @property
    def unresolved_below(self) -> float:
        return self.matched.unresolved_below()

    def to_dict(self) -> dict:
        return {"reference": self.names[0], "other": self.names[1], "dtypes": list(self.dtypes),
                "layer": self.layer, "lengths": list(self.lengths),
                "matched_pairs": int(self.matched.lam_ref.size), "tokens": self.matched.n_tokens,
                "unresolved_below": self.unresolved_below, "resolved_max_rel_err": RESOLVED_MAX,
                "beta": {m: {L: list(v) for L, v in self.betas[m].items()} for m in MODES},
                "delta_beta": {m: self.delta_beta(m) for m in MODES}}

    def plot(self, ax=None):
        """|δλ|/λ against λ_64 for every matched stable mode, the binned median, 10 % line."""
        ax = axes_or_new(ax)
        m = self.matched
        if m.lam_ref.size:
            err = np.maximum(m.rel_err, 1e-12)
            ax.loglog(m.lam_ref, err, ",", color="0.6", alpha=0.5)
            edges, med, _ = m.binned()
            c = np.sqrt(edges[1:] * edges[:-1])
            ok = np.isfinite(med) & (med > 0)
            ax.loglog(c[ok], med[ok], "o-", color="C0", ms=3, label="median per bin")
        ax.axhline(RESOLVED_MAX, color="C3", ls="--", lw=0.8, label="10 % relative error")
        lam_star = self.unresolved_below
        if np.isfinite(lam_star) and lam_star > 0:
            ax.axvline(lam_star, color="C3", lw=0.8, label=f"unresolved below λ ≈ {lam_star:.1e}")
        for v in self.window:
            ax.axvline(v, color="0.6", ls=":", lw=0.8)
        ax.set_xlabel(f"λ in {self.dtypes[0]} (every mode stable there)")
        ax.set_ylabel(f"|δλ|/λ  ({self.dtypes[1]} vs {self.dtypes[0]}, matched per token)")
        ax.set_title(f"precision, layer {self.layer}: {m.lam_ref.size:,} matched modes, "
                     f"{m.n_tokens} tokens", fontsize=9)
        ax.legend(fontsize=7)
        return ax

    def plot_tdos(self, ax=None):
        """Both TDOS at the longest L, with Δβ per L of the drawn mode count in the legend."""
        ax = axes_or_new(ax)
        db = self.delta_beta()
        for name, sp, c in zip(self.names, self.spectra, ("C0", "C3")):
            sp.plot(ax, color=c, label=f"{name}, min λ = {sp.support()[0]:.1e}")
        for v in self.window:
            ax.axvline(v, color="0.6", ls=":", lw=0.8)
        ax.set_title("Δβ (ref − other): " + ", ".join(f"L={L}: {v:+.4f}" for L, v in db.items()),
                     fontsize=8)
        ax.legend(fontsize=7)
        return ax


def compare_precision(path_a, path_b=None, model_a=None, model_b=None, layer=None, lengths=None,
                      window=WINDOW, modes=DEFAULT_MODES, skip=0) -> PrecisionComparison:
    """Compare two stores (or two models of one store) of one config, e.g. fp32 vs fp64.

    The higher precision is the reference; `lengths` default to every L both hold (8, 16, …
    up to the shorter planned length). β comes from the raw rates of positions skip <= t < L,
    both mode counts."""
    path_b = path_b or path_a
    sts = [open_store(path_a, model_a), open_store(path_b, model_b)]
    sts.sort(key=lambda s: s.dtype != "float64")          # reference (fp64) first, stable sort
    layer = sts[0].layers[len(sts[0].layers) // 2] if layer is None else layer
    lmax = min(s.layer_length[layer] for s in sts)
    lengths = sorted({L for L in (lengths or default_lengths(lmax)) if L <= lmax})
    betas = {m: {} for m in MODES}
    for L in lengths:
        cls = [block_classes(s, layer, L, skip=skip) for s in sts]
        for m in MODES:
            betas[m][L] = tuple(fit_ir_exponent(c[m].stable, window).beta for c in cls)
    spectra = tuple(tdos(aggregate(s.path).model(s.name), layer, lengths[-1], modes=modes)
                    for s in sts)
    return PrecisionComparison(tuple(s.name for s in sts), tuple(s.dtype for s in sts), layer,
                               lengths, betas, matched_rates(sts[0], sts[1], layer, lengths[-1]),
                               spectra, check_modes(modes), tuple(window))


def precision_pairs(stores) -> list:
    """(reference, other, layer) for every two models of one checkpoint (path, revision) in
    different dtypes that share a layer: the fp64 reruns of a paper config. The layer is 24
    (the paper's representative) when both hold it, else the middle shared layer."""
    out = []
    names = list(stores)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            sa, sb = stores[a], stores[b]
            same = ((sa.identity.get("path"), sa.identity.get("revision"))
                    == (sb.identity.get("path"), sb.identity.get("revision")))
            shared = sorted(set(sa.layers) & set(sb.layers))
            if same and sa.dtype != sb.dtype and shared:
                ref, other = (a, b) if sa.dtype == "float64" else (b, a)
                out.append((ref, other, 24 if 24 in shared else shared[len(shared) // 2]))
    return out


def measured_floors(stores) -> dict:
    """{other: {layer: (λ*, how)}}: the fp32 resolution λ* (`unresolved_below`) of each
    lower-precision model of a `precision_pairs` pair at every layer the pair shares, every
    token matched against its fp64 twin; the all-stable count of that layer leaves out the
    modes below it (studies/tables.resolution_floor). Every shared layer, not only the pair's
    representative one: the floor differs between layers (the demo: 5.6e-6 at layer 1, 1.8e-5
    at layer 2), and a layer without its own would fall back to the dtype table's."""
    out = {}
    for ref, other, _ in precision_pairs(stores):
        for layer in sorted(set(stores[ref].layers) & set(stores[other].layers)):
            lam = matched_rates(stores[ref], stores[other], layer).unresolved_below()
            out.setdefault(other, {})[layer] = (lam, f"measured against its fp64 twin {ref!r} "
                                                     f"at layer {layer} (precision study)")
    return out
