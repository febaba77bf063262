"""Counted tests: the p-value of a difference read from its interval, and Holm's step-down
over a stated family (docs/analysis.md, "Multiplicity").

Every verdict tdos prints ("differ", "agree at 90 %", "distinguishable from its null") is a
test of "difference = 0". A report prints dozens of them (pairs × layers × lengths × spans ×
observables); at 90 % each, some "differ" by chance alone. A `Family` names what it counts and
adjusts every member's p by Holm (1979): sort the m raw p ascending, p_(i) ↦ max_{j ≤ i}
min(1, (m − j + 1) p_(j)). Rejecting where the adjusted p < 1 − level holds the family-wise
error (any false "differ") at 1 − level under any dependence between the tests, which
matters here: nested lengths and neighbouring layers share their tokens. Holm rejects
everything Bonferroni does and more; Benjamini–Hochberg would control the false-discovery
rate instead, a weaker promise than "no false differ", which is what a verdict reads as.

The raw p comes from the interval itself, so a family of one reproduces the interval's
verdict exactly: with z = Φ⁻¹((1 + level)/2) and w the half-width on the side facing 0,
p = 2 Φ(−z |d| / w) (the normal approximation of the replicates on that side). It needs no
replicates, so intervals made anywhere (Δβ, depth, memory, nulls) enter one family.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from analysis.fit.resampling import verdict


def interval_p(d, lo, hi, level) -> float:
    """Two-sided p of "difference = 0" from the estimate d and its interval [lo, hi] at
    `level` (module docstring); NaN when there is no interval."""
    if not (np.isfinite(d) and np.isfinite(lo) and np.isfinite(hi)):
        return np.nan
    w = (d - lo) if d >= 0 else (hi - d)                  # half-width on the side facing 0
    if w <= 0:
        return 0.0 if d != 0 else 1.0
    z = stats.norm.ppf((1 + level) / 2)
    return float(2 * stats.norm.sf(z * abs(d) / w))


def holm(p) -> np.ndarray:
    """Holm's step-down adjusted p of the raw p (NaN entries stay NaN and are not counted)."""
    p = np.asarray(p, np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    m = int(ok.sum())
    if not m:
        return out
    order = np.argsort(p[ok], kind="stable")
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[ok][order]))
    vals = np.empty(m)
    vals[order] = adj
    out[ok] = vals
    return out


@dataclass
class Test:
    """One member of a family: a difference, its interval, raw and adjusted p."""
    name: str                  # what is compared, in words
    delta: float
    lo: float
    hi: float
    p_raw: float
    p_adjusted: float = np.nan

    def verdict(self, level) -> str:
        return verdict(self.lo, self.hi, level, self.p_adjusted)

    def to_dict(self) -> dict:
        return {"name": self.name, "delta": self.delta, "ci": [self.lo, self.hi],
                "p_raw": self.p_raw, "p_adjusted": self.p_adjusted}


@dataclass
class Family:
    """The tests one report or comparison makes, counted along its dimensions."""
    label: str                 # e.g. "tdos compare of 3 models"
    dims: dict                 # {"models": 3, "layers": 4, "lengths": 5, ...}: what multiplies
    level: float
    tests: list = field(default_factory=list)

    @property
    def m(self) -> int:
        return sum(np.isfinite(t.p_raw) for t in self.tests)

    def add(self, name, d, lo, hi) -> Test:
        t = Test(name, float(d), float(lo), float(hi), interval_p(d, lo, hi, self.level))
        self.tests.append(t)
        return t

    def correct(self) -> "Family":
        """Holm-adjust every member's p over the family; return self."""
        for t, a in zip(self.tests, holm([t.p_raw for t in self.tests])):
            t.p_adjusted = float(a)
        return self

    def describe(self) -> str:
        """One line: the family, its size and the correction."""
        dims = ", ".join(f"{k}: {v}" for k, v in self.dims.items())
        return (f"Family of tests ({self.label}; {dims}): {self.m} tests with an interval; "
                f"verdicts use Holm's step-down adjusted p (family-wise error ≤ "
                f"{1 - self.level:.0%}), raw and adjusted p side by side.")

    def table(self) -> list:
        """Markdown rows: test, Δ, CI, raw p, adjusted p, corrected verdict."""
        lines = ["| test | Δ | CI | p raw | p Holm | verdict (corrected) |", "|---|---|---|---|---|---|"]
        for t in self.tests:
            ci = f"[{t.lo:+.3g}, {t.hi:+.3g}]" if np.isfinite(t.lo) else "–"
            lines.append(f"| {t.name} | {t.delta:+.3g} | {ci} | {_p(t.p_raw)} | "
                         f"{_p(t.p_adjusted)} | {t.verdict(self.level)} |")
        return lines

    def to_dict(self) -> dict:
        return {"label": self.label, "dims": self.dims, "m": self.m, "level": self.level,
                "correction": "Holm step-down",
                "tests": [{**t.to_dict(), "verdict": t.verdict(self.level)} for t in self.tests]}


def _p(p) -> str:
    return "–" if not np.isfinite(p) else (f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}")
