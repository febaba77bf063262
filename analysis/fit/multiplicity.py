"""Counted tests: the p-value of a difference read from its interval's own distribution, and
Holm's step-down over a stated family (docs/analysis.md, "Multiplicity").

Every verdict tdos prints ("differ", "no difference shown at 90 %", "distinguishable from its
null") is a test of "difference = 0". A report prints dozens of them (pairs × layers ×
lengths × spans × observables); at 90 % each, some "differ" by chance alone. A `Family` names
what it counts and adjusts every member's p by Holm (1979): sort the m raw p ascending,
p_(i) ↦ max_{j ≤ i} min(1, (m − j + 1) p_(j)). Rejecting where the adjusted p < 1 − level
holds the family-wise error (any false "differ") at 1 − level under any dependence between
the tests, which matters here: nested lengths and neighbouring layers share their tokens.
Holm rejects everything Bonferroni does and more; Benjamini–Hochberg would control the
false-discovery rate instead, a weaker promise than "no false differ".

The raw p comes from the distribution the interval itself used, so a family of one reproduces
the interval's verdict exactly (p < 1 − level ⟺ the interval excludes 0), and each test
records that distribution as `p_method`:

- "t(ν)": an interval d ± t_{ν,q} se gives p = 2 F_ν(−|d| / se) (`p_from_t`); the normal
  limit ν = ∞ is "normal". From an interval alone, se = w / t_{ν,q} with w the half-width on
  the side facing 0 (`p_from_interval`).
- "bootstrap B=… (unit)": a percentile interval of B replicates d* gives the two-sided
  p = min(1, 2 (1 + #{d* on the far side of 0}) / (1 + B)) (`p_from_replicates`; Davison &
  Hinkley 1997, §4.4). It never falls below 2 / (1 + B): B replicates cannot resolve less.

A printed p never claims more resolution than its method has (`format_p`): a bootstrap p at its
floor prints "≤ 2/(1+B)"; a t or normal p below 1e-4 prints "< 1e-4", since nothing in a
handful of sequences pins the distribution's far tail.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from analysis._format import NORMAL, P_TAIL, format_p, p_floor, t_method  # noqa: F401 (public here too)
from analysis.fit.resampling import verdict


def _dof(dof) -> float:
    return np.inf if dof is None or not np.isfinite(dof) else float(dof)


def bootstrap_method(n_boot, unit) -> str:
    """The p_method of a percentile interval of `n_boot` replicates resampling `unit`."""
    return f"bootstrap B={int(n_boot)} ({unit})"


def quantile(level, dof=None) -> float:
    """The two-sided quantile of `level` for t with `dof` (None/inf: the normal)."""
    d = _dof(dof)
    q = (1 + level) / 2
    return float(stats.norm.ppf(q) if d == np.inf else stats.t.ppf(q, d))


def p_from_t(d, se, dof=None) -> float:
    """Two-sided p of "difference = 0" for d with standard error se under t_dof (None/inf:
    normal); NaN when either is not finite."""
    if not (np.isfinite(d) and np.isfinite(se)):
        return np.nan
    if se <= 0:
        return 0.0 if d != 0 else 1.0
    dist = stats.norm if _dof(dof) == np.inf else stats.t(_dof(dof))
    return float(2 * dist.sf(abs(d) / se))


def p_from_interval(d, lo, hi, level, dof=None) -> float:
    """Two-sided p from the estimate d and its interval [lo, hi] at `level`, built as
    d ± t_{dof,q} se (module docstring); NaN when there is no interval."""
    if not (np.isfinite(d) and np.isfinite(lo) and np.isfinite(hi)):
        return np.nan
    w = (d - lo) if d >= 0 else (hi - d)                  # half-width on the side facing 0
    return p_from_t(d, w / quantile(level, dof), dof)


def interval_p(d, lo, hi, level) -> float:
    """The normal-theory p of an interval (`p_from_interval` with ν = ∞)."""
    return p_from_interval(d, lo, hi, level)


def p_from_replicates(d, replicates) -> float:
    """Two-sided bootstrap p of "difference = 0": min(1, 2 (1 + n_far) / (1 + B)), n_far the
    replicates on the far side of 0 from d (0 itself counts as far); NaN without replicates."""
    r = np.asarray(replicates, np.float64)
    r = r[np.isfinite(r)]
    if not np.isfinite(d) or len(r) < 2:
        return np.nan
    if d == 0:
        return 1.0
    far = int((r <= 0).sum() if d > 0 else (r >= 0).sum())
    return float(min(1.0, 2 * (1 + far) / (1 + len(r))))


def welch_dof(se_a, dof_a, se_b, dof_b) -> float:
    """Welch–Satterthwaite degrees of freedom of se_a² + se_b² (inf when both are normal)."""
    va, vb = se_a ** 2, se_b ** 2
    den = (va ** 2 / dof_a if np.isfinite(dof_a) else 0.0) + (vb ** 2 / dof_b if np.isfinite(dof_b) else 0.0)
    return float((va + vb) ** 2 / den) if den > 0 else np.inf


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


def test_p(d, lo, hi, level, dof=None, replicates=None, unit="") -> tuple[float, str]:
    """(p, p_method) of a difference from the distribution its interval used: the bootstrap
    replicates when given (`unit`: what they resampled), else t with `dof` (None: normal)."""
    if replicates is not None and len(replicates):
        return p_from_replicates(d, replicates), bootstrap_method(len(replicates), unit or "?")
    return p_from_interval(d, lo, hi, level, dof), t_method(dof)


@dataclass
class Test:
    """One member of a family: a difference, its interval, raw and adjusted p, and the
    distribution the p was read from (`p_method`, module docstring)."""
    name: str                  # what is compared, in words: estimator, mode count, L, …
    delta: float
    lo: float
    hi: float
    p_raw: float
    p_adjusted: float = np.nan
    p_method: str = NORMAL
    short: str = ""            # "not enough data (n = …, needs …)": why it has no Δ, and no verdict

    def verdict(self, level) -> str:
        if self.short:
            return self.short
        return verdict(self.lo, self.hi, level, self.p_adjusted)

    def to_dict(self) -> dict:
        return {"name": self.name, "delta": self.delta, "ci": [self.lo, self.hi],
                "p_raw": self.p_raw, "p_adjusted": self.p_adjusted, "p_method": self.p_method}


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

    def add(self, name, d, lo, hi, *, dof=None, replicates=None, unit="", short="") -> Test:
        """Enter one difference; its p from its interval's distribution (`test_p`). `short`:
        the difference is short of its data (fit/enough.py), so it has no p and no verdict."""
        p, method = (np.nan, t_method(dof)) if short else test_p(d, lo, hi, self.level, dof,
                                                                  replicates, unit)
        t = Test(name, float(d), float(lo), float(hi), p, p_method=method, short=short)
        self.tests.append(t)
        return t

    @classmethod
    def counted(cls, label, dims, level, entries) -> "Family":
        """A family entered and Holm-corrected in one step, so no caller adjusts it later:
        `entries` [(name, d, lo, hi, {keywords of `add`})]."""
        fam = cls(label, dict(dims), level)
        for name, d, lo, hi, kw in entries:
            fam.add(name, d, lo, hi, **kw)
        return fam.correct()

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
                f"{1 - self.level:.0%}), raw and adjusted p side by side; each p is read from "
                f"its interval's own distribution (column \"p from\").")

    def table(self) -> list:
        """Markdown rows: test, Δ, CI, raw p, adjusted p, p method, corrected verdict."""
        lines = ["| test | Δ | CI | p raw | p Holm | p from | verdict (corrected) |",
                 "|---|---|---|---|---|---|---|"]
        for t in self.tests:
            ci = f"[{t.lo:+.3g}, {t.hi:+.3g}]" if np.isfinite(t.lo) and not t.short else "–"
            delta = f"{t.delta:+.3g}" if np.isfinite(t.delta) and not t.short else "–"
            lines.append(f"| {t.name} | {delta} | {ci} | {format_p(t.p_raw, t.p_method)} | "
                         f"{format_p(t.p_adjusted, t.p_method)} | {t.p_method} | "
                         f"{t.verdict(self.level)} |")
        return lines

    def to_dict(self) -> dict:
        return {"label": self.label, "dims": self.dims, "m": self.m, "level": self.level,
                "correction": "Holm step-down",
                "tests": [{**t.to_dict(), "verdict": t.verdict(self.level)} for t in self.tests]}

