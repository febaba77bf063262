"""A power law measured as a straight line in log–log, with a CI of its slope and the
comparison with a predicted slope (itself possibly an interval).

Used by the self-averaging laws (selfavg.py). Weighted least squares of y = a + slope·x
(x, y natural logs) with known per-point variances. Without an external standard error the
slope's is the weighted one, inflated by √(χ²/(m−2)) when the m points scatter about the
line more than their own errors allow, and the interval is slope ± z·se at `level`. Points
that reuse the same tokens (pooling sizes of one data set) are correlated, which that
formula ignores; selfavg.py therefore passes a delete-one-chunk jackknife se instead.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from analysis._plot import axes_or_new
from analysis.fit.enough import Enough, enough


@dataclass
class LawFit:
    """log y = intercept + slope · log x, fitted with a `level` CI; compared with `expected`."""
    name: str                  # what y is, in words (with its unit)
    xlabel: str                # what x is, in words
    slope: float
    se: float                  # standard error of the slope (inflated, see module docstring)
    lo: float
    hi: float
    level: float
    intercept: float
    chi2_red: float            # χ²/(m−2) of the weighted fit (≈ 1 when the points sit on a line)
    expected: float            # predicted slope
    expected_lo: float         # predicted slope's interval (= expected when it is exact)
    expected_hi: float
    method: str = ""           # how y and its errors were measured, in words
    x: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)      # log x
    y: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)      # log y
    y_se: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)   # se of log y

    @property
    def n_points(self) -> int:
        return len(self.x)

    @property
    def check(self) -> Enough:
        """The line held against its minimum of points (analysis/fit/enough.py)."""
        return enough("fit_points", self.n_points)

    @property
    def consistent(self) -> bool | None:
        """Whether the slope's CI and the predicted slope's interval overlap; None (no verdict)
        when either is not measured: too few points, or no interval (a jackknife short of
        chunks), or no prediction."""
        ends = (self.lo, self.hi, self.expected_lo, self.expected_hi)
        if not self.check or not np.isfinite(ends).all():
            return None
        return bool(self.lo <= self.expected_hi and self.expected_lo <= self.hi)

    def describe(self) -> str:
        if not self.check:
            return f"{self.name} vs {self.xlabel}: {self.check.text}"
        exp = (f"{self.expected:+.3f}" if self.expected_lo == self.expected_hi else
               f"{self.expected:+.3f} [{self.expected_lo:+.3f}, {self.expected_hi:+.3f}]")
        word = {True: "consistent", False: "NOT consistent", None: "no interval, no verdict"}
        return (f"{self.name} vs {self.xlabel}: slope {self.slope:+.3f} "
                f"[{self.lo:+.3f}, {self.hi:+.3f}] ({self.level:.0%} CI, {self.n_points} points, "
                f"χ²/dof {self.chi2_red:.2f}); predicted {exp}: {word[self.consistent]}")

    def to_dict(self) -> dict:
        return {"name": self.name, "x": self.xlabel, "slope": self.slope, "se": self.se,
                "ci": [self.lo, self.hi], "level": self.level, "chi2_red": self.chi2_red,
                "expected": self.expected, "expected_ci": [self.expected_lo, self.expected_hi],
                "consistent": self.consistent, "n_points": self.n_points, "method": self.method,
                "check": self.check.to_dict(),
                "points": {"log_x": self.x.tolist(), "log_y": self.y.tolist(),
                           "se_log_y": self.y_se.tolist()}}

    def plot(self, ax=None, color="C0", label=None):
        """Points (natural units) with ±1 se bars, the fitted line, and the predicted slope
        drawn through the points' weighted centre (not through any one point)."""
        ax = axes_or_new(ax)
        X, Y = np.exp(self.x), np.exp(self.y)
        err = np.vstack([Y - np.exp(self.y - self.y_se), np.exp(self.y + self.y_se) - Y])
        ax.errorbar(X, Y, yerr=err, fmt="o", ms=3, color=color, capsize=2,
                    label=label or f"{self.name}: {self.slope:+.2f} [{self.lo:+.2f}, {self.hi:+.2f}]")
        if self.n_points:
            xx = np.linspace(self.x.min(), self.x.max(), 20)
            ax.plot(np.exp(xx), np.exp(self.intercept + self.slope * xx), "-", color=color, lw=1)
            w = 1 / self.y_se ** 2
            xc, yc = (w * self.x).sum() / w.sum(), (w * self.y).sum() / w.sum()
            ax.plot(np.exp(xx), np.exp(yc + self.expected * (xx - xc)), "--", color=color, lw=0.8)
        ax.set_xscale("log"), ax.set_yscale("log")
        ax.set_xlabel(self.xlabel)
        return ax


def wls_slope(x, y, w):
    """(slope, intercept) of the weighted least-squares line through (x, y)."""
    xm, ym = (w * x).sum() / w.sum(), (w * y).sum() / w.sum()
    slope = (w * (x - xm) * (y - ym)).sum() / (w * (x - xm) ** 2).sum()
    return slope, ym - slope * xm


def fit_law(x, y, y_se, level=0.9, expected=np.nan, expected_ci=None, name="", xlabel="",
            method="", slope_se=None, dof=None) -> LawFit:
    """Weighted line through (log x, log y) with se of log y; non-finite points dropped.
    slope_se (with dof) replaces the weighted se by an external one (e.g. a jackknife's),
    the interval then from Student's t with dof degrees of freedom."""
    x, y, s = (np.asarray(a, np.float64) for a in (x, y, y_se))
    ok = np.isfinite(x) & np.isfinite(y) & np.isfinite(s) & (s > 0)
    x, y, s = x[ok], y[ok], s[ok]
    elo, ehi = sorted(expected_ci) if expected_ci is not None else (expected, expected)
    base = dict(name=name, xlabel=xlabel, level=level, expected=float(expected),
                expected_lo=float(elo), expected_hi=float(ehi), method=method, x=x, y=y, y_se=s)
    if len(x) < 3:
        return LawFit(slope=np.nan, se=np.nan, lo=np.nan, hi=np.nan, intercept=np.nan,
                      chi2_red=np.nan, **base)
    w = 1 / s ** 2
    slope, a = wls_slope(x, y, w)
    sxx = (w * (x - (w * x).sum() / w.sum()) ** 2).sum()
    chi2 = (w * (y - a - slope * x) ** 2).sum() / (len(x) - 2)
    se = np.sqrt(1 / sxx) * np.sqrt(max(chi2, 1.0))
    z = stats.norm.ppf((1 + level) / 2)
    if slope_se is not None:
        se, z = slope_se, stats.t.ppf((1 + level) / 2, dof)
    return LawFit(slope=float(slope), se=float(se), lo=float(slope - z * se),
                  hi=float(slope + z * se), intercept=float(a), chi2_red=float(chi2), **base)
