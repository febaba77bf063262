"""A trained value against the k nulls of one kind on the tokens they share, paired where
the design allows, with a rank test beside it where k allows (docs/analysis.md, "Reading a
declared test").

- **Unpaired** (k < 8, or an observable without leave-one-sequence-out values, e.g. one
  sequence): exactly studies/nulls.py's NullComparison, se_Δ² = se_t² + s_n²(1 + 1/k) with
  s_n² = max(var of the nulls' values, mean of their own se²), t(k − 1).
- **Paired** (k ≥ 8 and every side has leave-one-sequence-out values on the same
  sequences). Model: x_m = μ_m + a + ε_m on shared tokens, a the sequences' own effect
  (common to every model), ε_m a model's own sampling error, and a null's μ its kind's mean
  plus a seed effect u. The sampling term is the jackknife variance over the S sequences of
  D_(i) = t_(i) − mean_j n_j,(i), where a cancels: var(ε̄_t) + var(ε̄_n)/k. The seeds' term is
  var(u)(1 + 1/k) (a new seed, and the mean of k), var(u) = var_j(n_j) − var(ε̄_n) ≥ 0, with
  var(ε̄_n) read from the nulls' own paired residuals n_j − n̄ (their jackknife variance is
  (1 − 1/k) var(ε̄_n)). se_Δ² is their sum; the interval and its p use Student's t with the
  Welch–Satterthwaite degrees of freedom of the two terms (S − 1 and k − 1).
- **Rank test** (k ≥ 19): the trained value's rank among the k nulls on the same tokens,
  two-sided p = 2 min(1 + below, 1 + above)/(k + 1), exact under "the trained model is one
  more draw of the null kind" and never below 2/(k + 1); printed beside the t test, which
  stays the test the family counts.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.fit.enough import Enough, enough, worst
from analysis.fit.multiplicity import p_from_t, quantile, t_method, welch_dof
from analysis.studies.nulls import NullComparison, rank_p


@dataclass(frozen=True)
class Difference:
    """a − b of one observable of two models on the same tokens, with its interval and its p
    from the interval's own t; NaN where `check` fails."""
    delta: float
    lo: float
    hi: float
    dof: float
    p: float
    p_method: str
    check: Enough

    def to_dict(self) -> dict:
        return {"delta": self.delta, "ci": [self.lo, self.hi], "dof": self.dof, "p": self.p,
                "p_method": self.p_method, "check": self.check.to_dict()}


@dataclass(frozen=True)
class NullTest(Difference):
    """Trained against the nulls of one kind (module docstring)."""
    paired: bool = False
    k: int = 0
    null_mean: float = np.nan
    null_sd: float = np.nan
    rank: int | None = None
    p_rank: float | None = None

    def to_dict(self) -> dict:
        return {**super().to_dict(), "paired": self.paired, "n_nulls": self.k,
                "null_mean": self.null_mean, "null_sd": self.null_sd, "rank": self.rank,
                "p_rank": self.p_rank}


def _short(check, k, values=()) -> NullTest:
    v = np.asarray(values, np.float64)
    return NullTest(np.nan, np.nan, np.nan, np.nan, np.nan, "", check, k=k,
                    null_mean=float(v.mean()) if len(v) else np.nan)


def null_test(trained, nulls: dict, level: float) -> NullTest:
    """`trained` (a Measured) against {name: Measured} of one kind, all on the same tokens."""
    usable = {n: m for n, m in nulls.items() if m.ok}
    k = len(usable)
    values = np.array([m.value for m in usable.values()], np.float64)
    failed = [m.check for m in nulls.values() if not m.check.ok]
    check = worst(trained.check, enough("t_interval", k), *failed[:1])
    if not check.ok or not trained.ok:
        return _short(check, k, values)
    sd = float(values.std(ddof=1))
    jacks = [trained.jack, *(m.jack for m in usable.values())]
    paired = enough("paired", k).ok and all(j is not None and len(j) == len(trained.jack) >= 2
                                            for j in jacks)
    if paired:
        delta, lo, hi, dof, p = _paired(trained, list(usable.values()), values, level)
        method = f"{t_method(dof)}, paired over {len(trained.jack)} sequences"
    else:
        c = NullComparison("", "", trained, usable, level)
        delta, lo, hi, dof, p, method = c.delta, c.lo, c.hi, c.dof, c.p_raw, c.p_method
    rank = int((values < trained.value).sum())
    has_rank = enough("rank_test", k).ok
    return NullTest(float(delta), float(lo), float(hi), float(dof), float(p), method, check,
                    paired, k, float(values.mean()), sd, rank if has_rank else None,
                    rank_p(rank, k) if has_rank else None)


def _jack_var(x) -> float:
    """The jackknife variance of a statistic from its leave-one-out values x (S,)."""
    x = np.asarray(x, np.float64)
    return float((len(x) - 1) / len(x) * ((x - x.mean()) ** 2).sum())


def _paired(trained, nulls, values, level):
    """(Δ, lo, hi, dof, p) of the paired reading (module docstring)."""
    k, S = len(nulls), len(trained.jack)
    jacks = np.array([m.jack for m in nulls], np.float64)                        # (k, S)
    var_d = _jack_var(np.asarray(trained.jack) - jacks.mean(0))
    # one null's own sampling error, the sequences' shared effect cancelled: E[jack var of
    # n_j − n̄] = (1 − 1/k) var(ε̄)
    var_eps = k / (k - 1) * np.mean([_jack_var(j - jacks.mean(0)) for j in jacks])
    var_seed = max(float(values.var(ddof=1)) - var_eps, 0.0) * (1 + 1 / k)
    se = float(np.sqrt(var_d + var_seed))
    dof = welch_dof(np.sqrt(var_d), S - 1, np.sqrt(var_seed), k - 1) if var_seed > 0 else float(S - 1)
    delta = float(trained.value - values.mean())
    h = quantile(level, dof) * se
    return delta, delta - h, delta + h, dof, p_from_t(delta, se, dof)


def difference(a, b, level) -> Difference:
    """a − b (Measured, same tokens): paired t(S − 1) over the shared sequences when both have
    leave-one-sequence-out values, else se² = se_a² + se_b² with Welch–Satterthwaite."""
    check = worst(a.check, b.check)
    if not (a.ok and b.ok):
        return Difference(np.nan, np.nan, np.nan, np.nan, np.nan, "", check)
    delta = float(a.value - b.value)
    if a.jack is not None and b.jack is not None and len(a.jack) == len(b.jack):
        S = len(a.jack)
        se, dof = float(np.sqrt(_jack_var(np.asarray(a.jack) - np.asarray(b.jack)))), float(S - 1)
        method = f"{t_method(dof)}, paired over {S} sequences"
    else:
        sa, sb = a.se(level), b.se(level)
        se, dof = float(np.hypot(sa, sb)), welch_dof(sa, a.dof, sb, b.dof)
        method = t_method(dof)
    h = quantile(level, dof) * se
    return Difference(delta, delta - h, delta + h, dof, p_from_t(delta, se, dof), method, check)
