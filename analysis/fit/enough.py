"""Not enough data is a result: the documented minimum of every estimate, in one place
(docs/analysis.md, "Minimums").

An estimate made from fewer units than its minimum is not printed as a number with a verdict
beside it: it reads "not enough data (n = 86 stable modes in the window, needs 500)", and no
verdict word goes with it (REFEREE 15, issue 57). Every minimum is a row of `MINIMUMS`, with
what it counts and why that many; `enough(name, n)` holds one estimate against its row, and
`format_estimate` is the one way a report prints an estimate that may fall short.

Why each number:

- **beta, 500 stable modes in the window.** The in-window MLE's standard error is
  1/√(n·I(β)), I the Fisher information of the bounded power law per mode
  (1/(1+β)² − w² e^{w(1+β)}/(e^{w(1+β)} − 1)², w = ln(hi/lo)): on the paper's window at
  β = −0.2 that is 0.039 at n = 500 (`beta_se`), half the Mamba–Pythia difference the papers
  discuss (≈ 0.07); at 100 modes it is 0.09, larger than that difference.
- **local_exponent, 10 modes in a sub-window.** Below it a sub-window's MLE is one or two
  modes' positions; 10 modes give a relative se of about 1/√10 on (1+β).
- **token_mean, 4 tokens.** A mean over tokens with an interval needs a spread; fewer than
  4 tokens give no circular block plan (k ≥ 1 and N/k ≥ 4 blocks).
- **tail_width_token, 10 stable modes in one token.** Its 10 % quantile is then at least the
  token's second-smallest rate rather than its smallest alone.
- **t_interval, 2 nulls of a kind.** A t interval with k − 1 degrees of freedom needs k ≥ 2.
- **paired, 8 nulls of a kind.** Pairing on shared tokens reads the seeds' spread from the
  nulls alone (no floor from their own sampling error): below 8 that variance has < 7 degrees
  of freedom and the floor protects more than pairing gains.
- **rank_test, 19 nulls of a kind.** Its p cannot go below 2/(k + 1): 0.1 at k = 19, the
  level of a 90 % family.
- **spread, 2 ensemble members.** A standard deviation needs two values.
- **fit_points, 3 points.** A line through two points has no residual to test it by.
- **jackknife, 2 sequences.** A leave-one-out replicate needs another sequence to leave.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from analysis._format import short_of


@dataclass(frozen=True)
class Minimum:
    """The least data one estimate is reported from."""
    name: str
    needs: int
    counts: str                # what n counts, in words ("stable modes in the window")


MINIMUMS = {m.name: m for m in (
    Minimum("beta", 500, "stable modes in the window"),
    Minimum("local_exponent", 10, "modes in the sub-window"),
    Minimum("token_mean", 4, "tokens"),
    Minimum("tail_width_token", 10, "stable modes of the token"),
    Minimum("t_interval", 2, "nulls of the kind"),
    Minimum("paired", 8, "nulls of the kind"),
    Minimum("rank_test", 19, "nulls of the kind"),
    Minimum("spread", 2, "ensemble members"),
    Minimum("fit_points", 3, "points"),
    Minimum("jackknife", 2, "sequences"),
)}


@dataclass(frozen=True)
class Enough:
    """One estimate held against its minimum: n units of what `counts` names."""
    name: str
    n: int
    needs: int
    counts: str

    @property
    def ok(self) -> bool:
        return self.n >= self.needs

    def __bool__(self) -> bool:
        return self.ok

    @property
    def text(self) -> str:
        """'not enough data (n = 86 stable modes in the window, needs 500)'; '' when enough."""
        return short_of(self.to_dict())

    def to_dict(self) -> dict:
        return {"estimate": self.name, "n": int(self.n), "needs": int(self.needs),
                "counts": self.counts, "enough": self.ok}

    @classmethod
    def from_dict(cls, d) -> "Enough":
        return cls(d["estimate"], int(d["n"]), int(d["needs"]), d["counts"])


def enough(name: str, n) -> Enough:
    """Estimate `name` made from n units, against its row of MINIMUMS."""
    m = MINIMUMS[name]
    return Enough(name, int(n), m.needs, m.counts)


def worst(*checks: Enough | None) -> Enough | None:
    """The first check that falls short, else the first given (None when none is)."""
    checks = [c for c in checks if c is not None]
    return next((c for c in checks if not c.ok), checks[0] if checks else None)


def format_estimate(value, lo=None, hi=None, check: Enough | None = None, fmt="+.3f") -> str:
    """An estimate as a report prints it: "−0.262 [−0.275, −0.248]", or the check's "not
    enough data (n = …, needs …)" when it falls short, or "not measured" when the value is not
    finite; never "nan", and nothing a verdict could be read from."""
    if check is not None and not check.ok:
        return check.text
    if value is None or not math.isfinite(value):
        return "not measured"
    text = format(value, fmt)
    if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
        text += f" [{format(lo, fmt)}, {format(hi, fmt)}]"
    return text.replace("-", "\u2212")


def beta_se(n, beta=-0.2, window=(1e-4, 5e-2)) -> float:
    """The in-window MLE's standard error from n modes of ρ ∝ λ^β on `window` (Fisher
    information of the bounded power law; the module docstring's justification of 500)."""
    w, a = math.log(window[1] / window[0]), beta + 1
    info = 1 / a ** 2 - w ** 2 * math.exp(w * a) / math.expm1(w * a) ** 2
    return 1 / math.sqrt(n * info)
