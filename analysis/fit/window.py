"""The in-window MLE with a resampled CI, the local exponent β(λ), and how β moves with the
window.

Two estimators of β answer two questions:

- the **cumulative fit** (fits.fit_ir_exponent, the paper's): the log-slope of N(<λ) over
  the window. N counts every mode below λ, including the n_below modes under the window's
  lower edge, which add a constant to N across the window and flatten its slope; the
  number is what the paper reports, and moves with how many modes sit below the window;
- the **in-window MLE** (fits.mle_ir_exponent): the exponent of the density ρ ∝ λ^β of the
  modes inside the window alone; modes below it do not enter.

A pure power law from λ = 0 up gives both the same β; they part when the spectrum below the
window is not the continuation of the one inside it.

CIs of the MLE resample exactly as β's do (`resampling.py`: a jackknife over sequences, or
circular blocks of k tokens within a single one, k from the data). The MLE depends on the data
only through each token's count of in-window modes c_t and their sum of ln(λ/lo) S_t, so a
replicate is (Σ S*)/(Σ c*) solved for β (`fits.solve_s`).

Window mode density: the stable modes per token inside the window, a token mean with the
plan's interval. Where the power law is rejected, β is a window slope and the density is the
plainer number: how many slow modes a token has in the window, with no law assumed.

The infrared sub-window (`infrared_window`): the window without its top decade, [lo, hi/10]
([1e-4, 5e-3] for [1e-4, 5e-2]). The top decade is where the rates leave the infrared and
join the bulk (the local exponent bends there in the demo's models, and the whole trained-vs-
null difference of the demo's NeoX sits in it), so the lower part is where a power law may
still hold; it keeps ≥ 1 decade (a window narrower than 2 decades has none).

Local exponent: the same MLE, with its CI, in sliding sub-windows one decade wide whose
centres step by `step` decades across `span`: where a spectrum bends, β(λ) moves.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analysis._plot import axes_or_new, window_lines
from analysis.fit.enough import MINIMUMS, enough
from analysis.fit.fits import WINDOW, fit_ir_exponent, mle_ir_exponent, solve_s
from analysis.fit.resampling import Resampling, group_by_sequence, resampling_for

MIN_LOCAL = MINIMUMS["local_exponent"].needs   # modes a sub-window needs (fit/enough.py)
FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0)


@dataclass
class MLEInterval:
    """In-window MLE β with a CI from resampling tokens."""
    beta: float
    lo: float
    hi: float
    n_modes: int               # modes in the window
    n_below: int               # stable modes below the window's lower edge
    window: tuple
    level: float
    n_boot: int
    unit: str                  # what the interval resampled
    betas: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    dof: float = np.inf        # the interval's t degrees of freedom (the plan's)

    def to_dict(self) -> dict:
        return {"beta": self.beta, "ci": [self.lo, self.hi], "n_modes": self.n_modes,
                "n_below": self.n_below, "window": list(self.window), "level": self.level,
                "n_boot": self.n_boot, "unit": self.unit, "dof": self.dof,
                "check": enough("beta", self.n_modes).to_dict()}


def window_stats(rates_2d, windows) -> np.ndarray:
    """(N, n_windows, 2) per token: count of rates in each [lo, hi] and their Σ ln(λ/lo)."""
    r = np.asarray(rates_2d, np.float64)                                 # (N, d), NaN = no mode
    out = np.zeros((len(r), len(windows), 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        for j, (lo, hi) in enumerate(windows):
            m = (r >= lo) & (r <= hi)
            out[:, j, 0] = m.sum(1)
            out[:, j, 1] = np.where(m, np.log(r / lo), 0.0).sum(1)
    return out


def _mle_replicates(stats, seq, windows, n_boot, seed, unit="auto"):
    """Point β (n_w,), replicate β (n_boot, n_w) and the plan, for per-token stats (N, n_w, 2)."""
    w = np.array([np.log(hi / lo) for lo, hi in windows])                # (n_w,)
    tot = stats.sum(0)                                                   # (n_w, 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(tot[:, 0] >= MIN_LOCAL, tot[:, 1] / tot[:, 0], np.nan)
        point = np.array([solve_s(m, wj) for m, wj in zip(mean, w)]) - 1
        ubar = np.nan_to_num(mean)
        influence = (stats[:, :, 1] - stats[:, :, 0] * ubar).sum(1)      # (N,) linearised
    plan = resampling_for(influence, seq, unit)
    reps = plan.replicate_sums(stats.reshape(len(stats), -1), n_boot, seed)
    reps = reps.reshape(len(reps), -1, 2)                                # (B, n_w, 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        rmean = np.where(reps[..., 0] > 0, reps[..., 1] / reps[..., 0], np.nan)
    betas = np.stack([solve_s(rmean[:, j], w[j]) for j in range(len(w))], 1) - 1
    return point, betas, plan


def bootstrap_mle(rates_2d, seq=None, window=WINDOW, n_boot=500, level=0.9, seed=0) -> MLEInterval:
    """CI of the in-window MLE β from per-token rates (N, d) (NaN = no stable mode) in token
    order, `seq` the sequence of each row (None: one sequence)."""
    order, s = group_by_sequence(seq, len(rates_2d))
    r = np.asarray(rates_2d, np.float64)[order]
    stats = window_stats(r, [window])
    point, betas, plan = _mle_replicates(stats, s, [window], n_boot, seed)
    flat = r[np.isfinite(r)]
    mle = mle_ir_exponent(flat, window)
    lo, hi = plan.interval(mle.beta, betas[:, 0], level) if np.isfinite(point[0]) else (np.nan, np.nan)
    return MLEInterval(mle.beta, lo, hi, mle.n_modes, int((flat[flat > 0] < window[0]).sum()),
                       tuple(window), level, len(betas), plan.unit, betas[:, 0], float(plan.dof))


def infrared_window(window) -> tuple | None:
    """(lo, hi/10): the window without its top decade (module docstring); None when that
    leaves less than one decade."""
    lo, hi = window
    return (lo, hi / 10) if hi / lo >= 100 else None


@dataclass
class WindowDensity:
    """Stable modes per token inside `window`, with the plan's interval."""
    value: float
    lo: float
    hi: float
    window: tuple
    level: float
    unit: str
    dof: float
    reps: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)   # (B,) replicates
    resampling: Resampling | None = field(default=None, repr=False)

    def to_dict(self) -> dict:
        return {"value": self.value, "ci": [self.lo, self.hi], "window": list(self.window),
                "level": self.level, "unit": self.unit, "dof": self.dof}


def window_density(rates_2d, seq=None, window=WINDOW, n_boot=500, level=0.9,
                   seed=0) -> WindowDensity:
    """Modes per token in `window` from per-token rates (N, d) (NaN = no stable mode), `seq`
    each row's sequence; the interval resamples sequences as every interval does."""
    order, s = group_by_sequence(seq, len(rates_2d))
    c = window_stats(np.asarray(rates_2d, np.float64)[order], [window])[:, 0, 0]   # (N,)
    if not len(c):
        return WindowDensity(np.nan, np.nan, np.nan, tuple(window), level, "", np.inf)
    plan = resampling_for(c - c.mean(), s)
    sums = plan.replicate_sums(np.stack([c, np.ones_like(c)], 1), n_boot, seed)   # (B, 2)
    reps = sums[:, 0] / sums[:, 1]
    lo, hi = plan.interval(c.mean(), reps, level)
    return WindowDensity(float(c.mean()), lo, hi, tuple(window), level, plan.unit, float(plan.dof),
                         reps, plan)


@dataclass
class LocalExponent:
    """β(λ): the MLE in one-decade sub-windows centred at `centers`, with CIs."""
    centers: np.ndarray        # (n,) geometric centres of the sub-windows
    beta: np.ndarray           # (n,) NaN where a sub-window holds < MIN_LOCAL modes
    lo: np.ndarray
    hi: np.ndarray
    n_modes: np.ndarray        # (n,) modes per sub-window
    width: float               # decades per sub-window
    window: tuple              # the fit window the sub-windows are read against
    level: float
    unit: str

    def crossing(self, value) -> float:
        """The first λ (log-interpolated between centres) where β(λ) crosses `value`."""
        b, c = self.beta, np.log10(self.centers)
        ok = np.isfinite(b)
        b, c = b[ok], c[ok]
        d = np.sign(b - value)
        i = np.nonzero(d[1:] != d[:-1])[0]
        if not len(i):
            return np.nan
        j = i[0]
        return float(10 ** (c[j] + (value - b[j]) * (c[j + 1] - c[j]) / (b[j + 1] - b[j])))

    def to_dict(self) -> dict:
        return {"centers": self.centers.tolist(), "beta": self.beta.tolist(),
                "ci_lo": self.lo.tolist(), "ci_hi": self.hi.tolist(),
                "n_modes": self.n_modes.tolist(), "width_decades": self.width,
                "level": self.level, "unit": self.unit}

    def plot(self, ax=None, color="C0", label=None):
        ax = axes_or_new(ax)
        ax.fill_between(self.centers, self.lo, self.hi, color=color, alpha=0.25, lw=0)
        ax.semilogx(self.centers, self.beta, "o-", ms=3, color=color,
                    label=label or f"local MLE β, {self.width:g}-decade sub-windows "
                                   f"({self.level:.0%} CI, {self.unit})")
        window_lines(ax, self.window)
        ax.set_xlabel("sub-window centre λ (per block)")
        ax.set_ylabel("local exponent β(λ)")
        ax.legend(fontsize=7)
        return ax


def local_exponent(rates_2d, seq=None, window=WINDOW, span=None, width=1.0, step=0.125,
                   n_boot=500, level=0.9, seed=0) -> LocalExponent:
    """β(λ) in `width`-decade sub-windows whose centres step by `step` decades so that every
    sub-window lies inside `span` (default: the fit window)."""
    lo, hi = span or window
    half = width / 2
    c0, c1 = np.log10(lo) + half, np.log10(hi) - half
    logc = np.arange(c0, c1 + 1e-9, step) if c1 >= c0 else np.array([(c0 + c1) / 2])
    subs = [(10 ** (c - half), 10 ** (c + half)) for c in logc]
    order, s = group_by_sequence(seq, len(rates_2d))
    stats = window_stats(np.asarray(rates_2d, np.float64)[order], subs)
    point, betas, plan = _mle_replicates(stats, s, subs, n_boot, seed)
    ci = np.array([plan.interval(p, betas[:, j], level) if np.isfinite(p) else (np.nan, np.nan)
                   for j, p in enumerate(point)]).reshape(-1, 2)
    return LocalExponent(10 ** logc, point, ci[:, 0], ci[:, 1], stats.sum(0)[:, 0].astype(int),
                         width, tuple(window), level, plan.unit)


def edge_exponents(rates, window=WINDOW, width=1.0) -> tuple:
    """(β at the window's low end, β at its high end): the MLE in the `width`-decade
    sub-windows [lo, lo·10^width] and [hi·10^−width, hi] (NaN with < MIN_LOCAL modes)."""
    lo, hi = window
    out = []
    for sub in ((lo, lo * 10 ** width), (hi / 10 ** width, hi)):
        m = mle_ir_exponent(rates, sub)
        out.append(m.beta if m.n_modes >= MIN_LOCAL else np.nan)
    return tuple(out)


@dataclass
class WindowSensitivity:
    """β (both estimators) as each edge of the window moves by `FACTORS`, and β(λ)."""
    window: tuple
    rows: list                 # {edge, factor, window, beta_cumulative, beta_mle, n_modes}
    local: LocalExponent

    def to_dict(self) -> dict:
        return {"window": list(self.window), "rows": self.rows, "local": self.local.to_dict()}

    def plot(self, ax=None):
        """β against the moved edge's position (both edges, both estimators)."""
        ax = axes_or_new(ax)
        for edge, mk in (("lo", "o"), ("hi", "s")):
            rows = [r for r in self.rows if r["edge"] == edge]
            x = [r["window"][0 if edge == "lo" else 1] for r in rows]
            ax.semilogx(x, [r["beta_cumulative"] for r in rows], mk + "-", color="C1",
                        label=f"cumulative fit, {edge} edge moved")
            ax.semilogx(x, [r["beta_mle"] for r in rows], mk + "--", color="C0",
                        label=f"in-window MLE, {edge} edge moved")
        window_lines(ax, self.window)
        ax.set_xlabel("position of the moved edge λ")
        ax.set_ylabel("β over the moved window")
        ax.legend(fontsize=7)
        return ax


def window_sensitivity(rates_2d, seq=None, window=WINDOW, n_boot=500, level=0.9,
                       seed=0) -> WindowSensitivity:
    """β as each edge moves ×/÷ 2 and 4 (the other edge fixed), and the local exponent over
    the widest of those windows."""
    flat = np.asarray(rates_2d, np.float64)
    flat = flat[np.isfinite(flat) & (flat > 0)]
    lo, hi = window
    rows = []
    for edge in ("lo", "hi"):
        for f in FACTORS:
            w = (lo * f, hi) if edge == "lo" else (lo, hi * f)
            if not w[0] < w[1]:
                continue
            cum, mle = fit_ir_exponent(flat, w), mle_ir_exponent(flat, w)
            rows.append({"edge": edge, "factor": f, "window": list(w),
                         "beta_cumulative": cum.beta if cum.n_modes else np.nan,
                         "beta_mle": mle.beta, "n_modes": int(cum.n_modes)})
    span = (lo * min(FACTORS), hi * max(FACTORS))
    local = local_exponent(rates_2d, seq, window, span=span, n_boot=n_boot, level=level, seed=seed)
    return WindowSensitivity(tuple(window), rows, local)
