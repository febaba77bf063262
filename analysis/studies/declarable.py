"""The observables a study can declare: one measuring function per name of
sweep.format.study.OBSERVABLES (docs/analysis.md, "Declarable observables").

A measuring function reads one model group on a chosen set of tokens (`Tokens`: its first
`seqs` sequences, positions start ≤ t < stop) and returns a `Measured`: the value, its
interval at the settings' level, what the interval resampled, the degrees of freedom of its
quantile, the check of its minimum (fit/enough.py) and, with two or more sequences, its
leave-one-sequence-out values (`jack`, in sequence order), which a paired difference of two
models on the same sequences reads (studies/study.py). Nothing outside this registry branches
on an observable's name: a study asks the registry's entry what it needs (`window_range`: the
β test must hold across the window factors; `depth`: the store's `depth:` walk).

Every value is computed by the functions the rest of the report uses (window.bootstrap_mle,
window.window_density, bootstrap.bootstrap_ir_exponent, depth.kernel_points, the resampling
plan of resampling.py), under the store's primary estimator and mode count.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from analysis.fit.bootstrap import bootstrap_ir_exponent
from analysis.fit.enough import Enough, enough
from analysis.fit.multiplicity import quantile
from analysis.fit.resampling import resampling_for
from analysis.fit.window import bootstrap_mle, window_density
from analysis.spectrum.observables import token_rate_rows
from analysis.spectrum.rates import floor_edge, resolution_floor
from analysis.studies.depth import kernel_points
from analysis.studies.nulls import FirstSequences
from sweep.format.settings import Primary, Settings

TAIL_QUANTILES = (0.1, 0.5)      # tail_width = ln(λ_q[1] / λ_q[0]) of a token's stable rates


@dataclass(frozen=True)
class Tokens:
    """The tokens an observable is read on: the first `seqs` sequences, start ≤ t < stop."""
    seqs: int
    start: int
    stop: int

    def view(self, st):
        return FirstSequences(st, self.seqs)

    @property
    def positions(self) -> str:
        return f"{self.start} ≤ t < {self.stop}"


@dataclass
class Context:
    """What every measurement is computed under; `window` overrides the settings' own (the
    moved windows of the β range). `cache` keeps what a model's tokens give across observables
    and windows (its rates, its kernel points), keyed by store, model and tokens."""
    settings: Settings
    primary: Primary
    window: tuple | None = None
    cache: dict = field(default_factory=dict, repr=False)

    @property
    def fit_window(self) -> tuple:
        return tuple(self.window or self.settings.window)

    def moved(self, window) -> "Context":
        return Context(self.settings, self.primary, tuple(window), self.cache)


@dataclass(frozen=True)
class Measured:
    """One model's value of one observable on one set of tokens (module docstring)."""
    value: float
    lo: float
    hi: float
    unit: str
    dof: float
    check: Enough
    positions: str
    jack: tuple | None = None          # leave-one-sequence-out values, sequence order

    @property
    def ok(self) -> bool:
        return self.check.ok and bool(np.isfinite(self.value)) and bool(np.isfinite(self.lo))

    def se(self, level) -> float:
        if not np.isfinite(self.lo):
            return np.nan
        return float((self.hi - self.lo) / (2 * quantile(level, self.dof)))

    def to_dict(self) -> dict:
        return {"value": self.value, "ci": [self.lo, self.hi], "unit": self.unit, "dof": self.dof,
                "positions": self.positions, **self.check.to_dict()}

    @classmethod
    def missing(cls, check: Enough, positions: str) -> "Measured":
        return cls(np.nan, np.nan, np.nan, "", np.inf, check, positions)


@dataclass(frozen=True)
class Declarable:
    """One declarable observable: its measuring function and what a study must know of it."""
    name: str
    label: str                 # in words, for reports
    measure: Callable          # (st, layer, Tokens, Context) -> Measured
    window_range: bool = False  # a test of it holds only across the window factors (window.FACTORS)
    depth: bool = False        # read from the `depth:` walk (cross-layer)


DECLARABLE: dict[str, Declarable] = {}


def register(name, label, window_range=False, depth=False):
    def add(fn):
        DECLARABLE[name] = Declarable(name, label, fn, window_range, depth)
        return fn
    return add


def _jack(reps, seq) -> tuple | None:
    """The replicates as leave-one-sequence-out values when the plan was the jackknife
    (resampling.py's rule: two or more sequences), else None."""
    n = len(np.unique(seq))
    reps = np.asarray(reps, np.float64)
    return tuple(float(x) for x in reps) if n >= 2 and len(reps) == n else None


def _rates(st, layer, tokens, ctx):
    """(rates (N, d), seq (N,)) of the tokens, under the primary count; read once per model,
    layer and tokens (the moved windows of the β range read the same rates)."""
    key = ("rates", st.path, st.name, layer, tokens, ctx.primary.modes)
    if key not in ctx.cache:
        ctx.cache[key] = token_rate_rows(tokens.view(st), layer, tokens.stop,
                                         skip=tokens.start)[ctx.primary.modes]
    return ctx.cache[key]


@register("beta", "the primary β", window_range=True)
def beta(st, layer, tokens, ctx) -> Measured:
    rates, seq = _rates(st, layer, tokens, ctx)
    s, w = ctx.settings, ctx.fit_window
    if ctx.primary.estimator == "mle":
        m = bootstrap_mle(rates, seq, w, s.n_boot, s.level, s.seed)
        return Measured(m.beta, m.lo, m.hi, m.unit, m.dof, enough("beta", m.n_modes),
                        tokens.positions, _jack(m.betas, seq))
    floor = floor_edge(resolution_floor(st.dtype)[0])[0] if ctx.primary.modes == "all-stable" else 0.0
    rows = [r[np.isfinite(r) & (r >= floor)] for r in rates]       # as Table I counts them
    b = bootstrap_ir_exponent(rows, w, s.n_boot, s.level, s.seed, seq)
    return Measured(b.beta, b.lo, b.hi, b.unit, b.dof, enough("beta", b.fit.n_modes),
                    tokens.positions, _jack(b.betas, seq))


@register("density", "the window mode density")
def density(st, layer, tokens, ctx) -> Measured:
    rates, seq = _rates(st, layer, tokens, ctx)
    s = ctx.settings
    d = window_density(rates, seq, ctx.fit_window, s.n_boot, s.level, s.seed)
    return Measured(d.value, d.lo, d.hi, d.unit, d.dof, enough("token_mean", len(rates)),
                    tokens.positions, _jack(d.reps, seq))


def tail_widths(rates_2d) -> np.ndarray:
    """(N,) ln(λ_50/λ_10) of each token's stable rates (rows of (N, d), NaN = not stable);
    NaN for a token with fewer stable modes than its minimum. Every quantile of cλ is c times
    the quantile of λ, so a rescaling of the rates leaves each ratio unchanged."""
    r = np.sort(np.asarray(rates_2d, np.float64), axis=1)            # NaN sort last
    n = np.isfinite(r).sum(1)                                        # (N,)
    rows = np.arange(len(r))

    def quantile(q):                                                 # numpy's linear rule, per row
        pos = q * np.maximum(n - 1, 0)
        i = np.floor(pos).astype(int)
        j = np.minimum(i + 1, np.maximum(n - 1, 0))
        return r[rows, i] + (pos - i) * (r[rows, j] - r[rows, i])

    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.log(quantile(TAIL_QUANTILES[1]) / quantile(TAIL_QUANTILES[0]))
    return np.where(n >= enough("tail_width_token", 0).needs, out, np.nan)


@register("tail_width", "the tail width ln(λ_50/λ_10)")
def tail_width(st, layer, tokens, ctx) -> Measured:
    rates, seq = _rates(st, layer, tokens, ctx)
    return token_mean(tail_widths(rates), seq, ctx.settings, tokens.positions)


def _per_token(st, layer, tokens, reader):
    view = tokens.view(st)
    vals = [getattr(view, reader)(layer, q)[tokens.start:tokens.stop] for q in range(view.n_seqs)]
    return np.concatenate(vals), np.repeat(np.arange(view.n_seqs), [len(x) for x in vals])


@register("log_frobenius", "ln ‖J_tt‖_F²")
def log_frobenius(st, layer, tokens, ctx) -> Measured:
    v, seq = _per_token(st, layer, tokens, "frobenius2")
    with np.errstate(divide="ignore", invalid="ignore"):
        return token_mean(np.where(v > 0, np.log(np.abs(v)), np.nan), seq, ctx.settings,
                          tokens.positions)


@register("nonnormality", "the non-normality of J_tt")
def nonnormality(st, layer, tokens, ctx) -> Measured:
    return token_mean(*_per_token(st, layer, tokens, "nonnormality"), ctx.settings, tokens.positions)


def _kernel(part, st, layer, tokens, ctx) -> Measured:
    """ln of the kernel's `part` at start `layer`, the longest span stored there (geometric
    mean over every walked token of the first `tokens.seqs` sequences)."""
    where = f"every walked t ≥ {tokens.start}"
    if not st.depth:
        return Measured.missing(enough("token_mean", 0), "no depth walk in the store")
    key = ("kernel", st.path, st.name, tokens.seqs, tokens.start)
    if key not in ctx.cache:
        settings = ctx.settings.replace(skip_positions=tokens.start)
        ctx.cache[key] = kernel_points(tokens.view(st), settings)
    points = [p for p in ctx.cache[key] if p.layer == layer and p.span > 1]
    if not points:
        return Measured.missing(enough("token_mean", 0), f"no stack of span ≥ 2 starts at layer {layer}")
    k = max(points, key=lambda p: p.span)
    c = getattr(k, part)
    n = c.resampling.n_tokens if c.resampling is not None else 0
    if not (c.value > 0 and c.lo > 0):
        return Measured.missing(enough("token_mean", n), where)
    reps = np.log(c.reps) if c.resampling is not None and c.resampling.jackknife else ()
    return Measured(*np.log([c.value, c.lo, c.hi]).tolist(), f"{c.unit} (span {k.span})",
                    float(c.resampling.dof) if c.resampling is not None else np.inf,
                    enough("token_mean", n), where,
                    tuple(float(x) for x in reps) if len(reps) else None)


@register("alignment", "the kernel's ln alignment", depth=True)
def alignment(st, layer, tokens, ctx) -> Measured:
    return _kernel("alignment", st, layer, tokens, ctx)


@register("kernel_nonnormality", "the kernel's ln non-normality", depth=True)
def kernel_nonnormality(st, layer, tokens, ctx) -> Measured:
    return _kernel("nonnormality", st, layer, tokens, ctx)


def token_mean(values, seq, settings: Settings, positions="") -> Measured:
    """Mean over tokens of a per-token value (NaN left out), its interval from resampling.py's
    plan (the jackknife over ≥ 2 sequences, else circular blocks)."""
    v = np.asarray(values, np.float64)
    ok = np.isfinite(v)
    v, seq = v[ok], np.asarray(seq)[ok]
    check = enough("token_mean", len(v))
    if not check.ok:
        return Measured.missing(check, positions)
    order = np.argsort(seq, kind="stable")
    v, seq = v[order], seq[order]
    plan = resampling_for(v - v.mean(), seq)
    sums = plan.replicate_sums(np.stack([v, np.ones_like(v)], 1), settings.n_boot, settings.seed)
    reps = sums[:, 0] / sums[:, 1]
    lo, hi = plan.interval(v.mean(), reps, settings.level)
    return Measured(float(v.mean()), lo, hi, plan.unit, float(plan.dof), check, positions,
                    _jack(reps, seq) if plan.jackknife else None)
