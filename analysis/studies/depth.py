"""Stacked blocks (a store swept with `depth:`): does the infrared power law survive
composition, how much of what s blocks do the blocks' spectra, their non-normality and the
alignment between layers account for, and how non-normal is each block.

Per model, over the run of swept layers l0..l1 (S = l1 − l0 + 1 blocks), from the store:

- **β against span s.** The per-step rates of the stack, λ^(s) = −ln|ζ|/s for the
  eigenvalues ζ of P_t(l, s) = J^(l+s−1)_tt ⋯ J^(l)_tt, pooled over every start l and token,
  go through the same fit, bootstrap, MLE and goodness of fit as single blocks (s = 1: the
  run's single blocks pooled the same way). Both mode counts: all-stable is every
  0 < |ζ| < 1; symmetry-removed drops the stack's eigenvalue along 𝟙/√d wherever the stored
  Rayleigh residual of P_t there is small (LayerNorm's shift: J𝟙 = 𝟙 at every block, so
  P𝟙 = 𝟙; by its eigenvector, as for one block) and the per-step rates below the dtype's
  marginal threshold (the error of ln|ζ| grows with the s factors, so the floor of the
  per-step rate is the single block's). The norm's scale direction h_{l,t} is invariant
  under one block only, not under their product: no scale mode is removed from a stack. The
  stack modes below that floor are counted (`below_floor`).
- **The response kernel, decomposed like for like.** Per start l and span s, over the stack's
  own layers j = l..l+s−1 (every quantity per token, then a geometric mean over tokens with its
  CI on the log scale; the arithmetic means beside it):
  measured g(l, s) = ‖P_t(l, s)‖_F²/d, the mean squared gain of a random unit perturbation;
  the spectral prediction Π_j Σ|ζ_j|²/d; the independent-layers prediction Π_j ‖J_j‖_F²/d;
  non-normality = independent / spectral (≥ 1 per token, Schur; 1 for normal blocks) and
  cross-layer alignment = measured / independent (1 on average for layers whose singular
  directions are independent and uniformly oriented; above 1 when the layers' amplifying
  directions line up across depth). Every ratio of two quantities is invariant to an
  orthogonal change of basis of the residual stream, as each factor is.
- **Finite-depth Lyapunov exponents** γ_i = (1/S) ln σ_i(P_t(l0, S)) of each token over the
  run (sweep/numerics/depth.py), basis-invariant: their mean spectrum, the top exponent γ_1
  and the count of positive ones. Benettin's QR exponents are kept in the store as a
  diagnostic (`lyapunov_qr`), not used here.
- **Non-normality against depth:** Henrici's departure of J_tt and ‖J_tt‖_F²/d per layer.

The kernel's and the exponents' point estimates are plain means over tokens: no resampling
enters them.
Every mean's CI resamples the tokens as β's bootstrap does (resampling.py: whole sequences
with ≥ 20 of them, else circular blocks of tokens); a token is one unit with all its starts.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from analysis.fit.bootstrap import bootstrap_ir_exponent
from analysis.fit.resampling import Resampling, difference_interval, resampling_for, verdict
from analysis.spectrum.rates import classify_rows, marginal_threshold, scale_mask
from analysis.studies.rows import ModeRow, mode_row
from sweep.format.settings import MODES, Settings


@dataclass
class MeanCI:
    """A mean over tokens with its CI, and the replicates a comparison draws from."""
    value: float
    lo: float
    hi: float
    unit: str
    reps: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    resampling: Resampling | None = field(repr=False, default=None)

    def to_dict(self) -> dict:
        return {"value": self.value, "ci": [self.lo, self.hi], "unit": self.unit}

    def exp(self) -> "MeanCI":
        """The geometric mean exp⟨x⟩ of a mean ⟨x⟩ of logs, its CI mapped the same way."""
        return MeanCI(float(np.exp(self.value)), float(np.exp(self.lo)), float(np.exp(self.hi)),
                      self.unit, np.exp(self.reps), self.resampling)


# the kernel's quantities, in the order KernelPoint holds them (module docstring)
KERNEL_PARTS = ("measured", "spectral", "independent", "nonnormality", "alignment")


@dataclass
class KernelPoint:
    """Start l, span s: the measured kernel g and its decomposition (module docstring), each a
    geometric mean over tokens with its CI (resampled on the log scale), and the arithmetic
    means beside them (`arithmetic`: {part: value}, points only)."""
    layer: int
    span: int
    measured: MeanCI
    spectral: MeanCI
    independent: MeanCI
    nonnormality: MeanCI
    alignment: MeanCI
    arithmetic: dict = field(default_factory=dict)
    PARTS: ClassVar[tuple] = KERNEL_PARTS

    def to_dict(self) -> dict:
        return {"layer": self.layer, "span": self.span, "mean": "geometric over tokens",
                **{k: getattr(self, k).to_dict() for k in KERNEL_PARTS},
                "arithmetic": dict(self.arithmetic)}


@dataclass(frozen=True)
class DepthStudy:
    """Everything the depth section reports for one model (module docstring)."""
    model: str
    dtype: str
    layers: tuple                    # (l0, l1): the run
    spans: list                      # [1, s, ...]: 1 is the single blocks
    n_tokens: int                    # walked tokens (sequence × position) the numbers pool
    singular: int                    # walked tokens left out: some γ = −∞ (P_t singular)
    level: float
    window: tuple
    beta: dict                       # {modes: {span: ModeRow}}
    boots: dict = field(repr=False, default_factory=dict)   # {modes: {span: BootstrapIR}}
    below_floor: dict = field(default_factory=dict)         # {span: all-stable modes below the floor}
    floor: float = 0.0               # the marginal threshold of the per-step rate
    kernel: list = field(default_factory=list)              # [KernelPoint]
    lyapunov: np.ndarray = field(repr=False, default_factory=lambda: np.zeros((0, 0)))  # (N, d)
    lyapunov_mean: list = field(default_factory=list)       # [MeanCI] per exponent index
    top: MeanCI | None = None        # γ_1
    positive: MeanCI | None = None   # exponents > 0 per token
    nonnormality: dict = field(default_factory=dict)        # {layer: MeanCI}
    frobenius: dict = field(default_factory=dict)           # {layer: MeanCI} of ‖J_tt‖_F²/d
    rates: dict = field(repr=False, default_factory=dict)   # {span: all-stable per-step rates}

    def to_dict(self) -> dict:
        return {"layers": list(self.layers), "spans": self.spans, "n_tokens": self.n_tokens,
                "singular_tokens_left_out": self.singular,
                "level": self.level, "window": list(self.window),
                "per_step_rate": "λ^(s) = −ln|ζ(P_t(l, s))| / s, pooled over starts l and tokens",
                "floor": self.floor, "below_floor_all_stable": self.below_floor,
                "beta_vs_span": {m: {s: _row_dict(r) for s, r in rows.items()}
                                 for m, rows in self.beta.items()},
                "kernel": [k.to_dict() for k in self.kernel],
                "lyapunov": {"top": self.top.to_dict() if self.top else None,
                             "positive_per_token": self.positive.to_dict() if self.positive else None,
                             "mean_spectrum": [m.value for m in self.lyapunov_mean],
                             "over_layers": list(self.layers)},
                "nonnormality": {ly: m.to_dict() for ly, m in self.nonnormality.items()},
                "frobenius2_over_d": {ly: m.to_dict() for ly, m in self.frobenius.items()}}


def _row_dict(r: ModeRow) -> dict:
    return {k: getattr(r, k) for k in ("beta", "ci_lo", "ci_hi", "ci_unit", "r2", "n_modes",
                                       "mle_beta", "mle_ci_lo", "mle_ci_hi", "ks", "gof_p")}


def depth_study(st, settings: Settings | None = None) -> DepthStudy:
    """The depth section of model group `st` (an analysis Store swept with `depth:`)."""
    settings = settings or Settings()
    l0, l1 = st.lyapunov_layers
    spans = [1, *st.depth_spans]
    skip = settings.skip_positions
    seq, walked, singular = _walked(st, skip)
    floor = marginal_threshold(st.dtype)
    beta, boots, rates = {m: {} for m in MODES}, {m: {} for m in MODES}, {}
    for s in spans:
        rows = _single_rows(st, walked, skip) if s == 1 else _stack_rows(st, s, walked, skip, floor)
        for m in MODES:
            boots[m][s] = bootstrap_ir_exponent(rows[m], settings.window, settings.n_boot,
                                                settings.level, settings.seed, seq=seq)
            beta[m][s] = mode_row(rows[m], seq, boots[m][s], settings)
        lam = rows["all-stable"]
        rates[s] = lam[np.isfinite(lam)]
    gamma = np.concatenate([st.lyapunov(q)[skip:][w] for q, w in walked])       # (N, d)
    fro, hen = {}, {}
    for ly in range(l0, l1 + 1):
        f = np.concatenate([st.frobenius2(ly, q)[skip:][w] for q, w in walked]) / st.d_model
        h = np.concatenate([st.nonnormality(ly, q)[skip:][w] for q, w in walked])
        fro[ly], hen[ly] = _means(f[:, None], seq, settings)[0], _means(h[:, None], seq, settings)[0]
    return DepthStudy(
        st.name, st.dtype, (l0, l1), spans, int(len(seq)), singular, settings.level,
        settings.window, beta, boots, {s: int((r < floor).sum()) for s, r in rates.items()}, floor,
        _kernel(st, spans, walked, skip, seq, settings), gamma, _means(gamma, seq, settings),
        _means(gamma[:, :1], seq, settings)[0],
        _means((gamma > 0).sum(1, keepdims=True).astype(float), seq, settings)[0], hen, fro, rates)


def kernel_points(st, settings: Settings | None = None) -> list:
    """The kernel decomposition alone ([KernelPoint] per start and span), without the β fits
    of `depth_study`: what a comparison with null models reads."""
    settings = settings or Settings()
    seq, walked, _ = _walked(st, settings.skip_positions)
    return _kernel(st, [1, *st.depth_spans], walked, settings.skip_positions, seq, settings)


def _walked(st, skip):
    """(seq id per walked token (N,), [(seq, (L − skip,) bool)], tokens left out): the
    tokens t >= skip whose walk is stored and whose exponents are all finite."""
    walked, singular = [], 0
    for q in range(st.n_seqs):
        g = st.lyapunov(q)[skip:]
        stored = ~np.isnan(g).all(1)
        ok = stored & np.isfinite(g).all(1)
        singular += int((stored & ~ok).sum())
        walked.append((q, ok))
    seq = np.concatenate([np.full(int(w.sum()), q) for q, w in walked])
    if not len(seq):
        from analysis.io.store import StoreError

        raise StoreError(f"model {st.name!r}: no token's walk up the layers is stored yet — "
                         f"finish the sweep (`tdos sweep --resume`)")
    return seq, walked, singular


def _single_rows(st, walked, skip) -> dict:
    """{modes: (N, d·S)}: every walked token's single-block stable rates, the run's layers
    side by side (the scale mode found by ρ_t, r_t, as for one layer)."""
    l0, l1 = st.lyapunov_layers
    thr = marginal_threshold(st.dtype)
    out = {m: [] for m in MODES}
    for q, w in walked:
        per_layer = {m: [] for m in MODES}
        for ly in range(l0, l1 + 1):
            rho, resid = (a[skip:][w] for a in st.norm_directions(ly, q))
            zeta = st.eigenvalues(ly, q)[skip:][w]
            for m, (rates, _) in classify_rows(zeta, thr, rho, resid).items():
                per_layer[m].append(rates)
        for m in MODES:
            out[m].append(np.concatenate(per_layer[m], axis=1))
    return {m: np.concatenate(v) for m, v in out.items()}


def _stack_rows(st, s, walked, skip, floor) -> dict:
    """{modes: (N, d·starts)}: per-step rates −ln|ζ|/s of every stack of span s, per token;
    symmetry-removed drops the eigenvalue of P_t nearest its Rayleigh quotient along 𝟙/√d
    where the residual says 𝟙 is an eigenvector (LayerNorm's shift, invariant under every
    block), and the per-step rates below the floor."""
    l0, l1 = st.lyapunov_layers
    out = {m: [] for m in MODES}
    for q, w in walked:
        zeta, shift = [], []
        for ly in range(l0, l1 - s + 2):
            z = st.stack_eigenvalues(ly, s, q)[skip:][w]                           # (n, d)
            rho, resid = (a[skip:][w] for a in st.stack_shift_direction(ly, s, q))
            zeta.append(z)
            shift.append(scale_mask(z, rho, resid))
        step = np.abs(np.concatenate(zeta, axis=1)) ** (1.0 / s)                # |ζ|^(1/s)
        for m, (rates, _) in classify_rows(step, floor, scale=np.concatenate(shift, 1)).items():
            out[m].append(rates)
    return {m: np.concatenate(v) for m, v in out.items()}


def _kernel(st, spans, walked, skip, seq, settings) -> list:
    """[KernelPoint] of every start and span whose stack lies inside the run."""
    l0, l1 = st.lyapunov_layers
    d = st.d_model

    def per_token(read, ly):                                                   # (N,)
        return np.concatenate([read(ly, q)[skip:][w] for q, w in walked])

    # per layer, per token: Σ|ζ|²/d and ‖J_tt‖_F²/d
    spec = {ly: per_token(lambda y, q: (np.abs(st.eigenvalues(y, q)) ** 2).sum(1), ly) / d
            for ly in range(l0, l1 + 1)}
    fro = {ly: per_token(st.frobenius2, ly) / d for ly in range(l0, l1 + 1)}
    out = []
    for ly in range(l0, l1 + 1):
        for s in spans:
            if ly + s - 1 > l1:
                continue
            g = fro[ly] if s == 1 else per_token(lambda y, q: st.stack_gain(y, s, q), ly)
            stack = range(ly, ly + s)
            out.append(_kernel_point(ly, s, g, [spec[j] for j in stack], [fro[j] for j in stack],
                                     seq, settings))
    return out


def _kernel_point(ly, s, g, spec, fro, seq, settings) -> KernelPoint:
    """g (N,) per token; spec, fro: per layer of the stack, (N,) Σ|ζ_j|²/d and ‖J_j‖_F²/d."""
    with np.errstate(divide="ignore"):
        log_g, log_spec = np.log(g), np.log(spec).sum(0)                       # (N,), (N,)
        log_ind = np.log(fro).sum(0)                                           # (N,)
    logs = np.stack([log_g, log_spec, log_ind, log_ind - log_spec, log_g - log_ind], 1)
    geo = [m.exp() for m in _means(logs, seq, settings)]
    arith_spec = float(np.prod([x.mean() for x in spec]))
    arith_ind = float(np.prod([x.mean() for x in fro]))
    arith = {"measured": float(g.mean()), "spectral": arith_spec, "independent": arith_ind,
             "nonnormality": arith_ind / arith_spec, "alignment": float(g.mean()) / arith_ind}
    return KernelPoint(ly, s, *geo, arithmetic=arith)


def _means(x, seq, settings) -> list:
    """[MeanCI] of each column of x (N, k) over tokens, resampled as β's bootstrap is."""
    x = np.asarray(x, np.float64)
    mean = x.mean(0)
    plan = resampling_for(x[:, 0] - mean[0], seq)
    ones = np.ones((len(x), 1))
    sums = plan.replicate_sums(np.concatenate([x, ones], 1), settings.n_boot, settings.seed)
    reps = sums[:, :-1] / sums[:, -1:]
    return [MeanCI(float(mean[j]), *plan.interval(mean[j], reps[:, j], settings.level), plan.unit,
                   reps[:, j], plan) for j in range(x.shape[1])]


@dataclass(frozen=True)
class DepthDelta:
    """One difference between two models' depth numbers, with its CI."""
    a: str
    b: str
    what: str            # "beta" (at span s, count modes) | "top_lyapunov"
    span: int | None
    modes: str | None
    delta: float
    lo: float
    hi: float
    level: float
    p_adjusted: float = float("nan")   # Holm-adjusted within the report's family (compare.py)

    @property
    def verdict(self) -> str:
        return verdict(self.lo, self.hi, self.level, self.p_adjusted)

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "what": self.what, "span": self.span,
                "modes": self.modes, "delta": self.delta, "ci": [self.lo, self.hi],
                "level": self.level, "verdict": self.verdict}


def compare_depth(studies: dict, level: float) -> list:
    """[DepthDelta]: Δβ at every span both models have (both counts) and Δγ_1, for every pair
    of {name: DepthStudy}, each side's replicates drawn independently (compare.py's recipe)."""
    names, out = list(studies), []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            da, db = studies[a], studies[b]
            for s in [x for x in da.spans if x in db.spans]:
                for m in MODES:
                    x, y = da.boots[m][s], db.boots[m][s]
                    out.append(DepthDelta(a, b, "beta", s, m, *difference_interval(
                        x.beta, x.betas, x.resampling, y.beta, y.betas, y.resampling, level), level))
            x, y = da.top, db.top
            out.append(DepthDelta(a, b, "top_lyapunov", None, None, *difference_interval(
                x.value, x.reps, x.resampling, y.value, y.reps, y.resampling, level), level))
    return out
