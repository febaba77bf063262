"""What a declared study can detect, before it is swept (docs/power.md).

For every test of the config's `study:` (observable, layer, null kind) the dry run gives the
smallest |Δ| = |trained − mean of the kind's k nulls| the design detects with 80 % power at
Holm's strictest step, α / m over the family's m tests, with the analysis' own test
(analysis/studies/nulls.py: Δ / se_Δ against t with k − 1 degrees of freedom):

    se_Δ² = v_trained / n + (v_seed + v_null / n) (1 + 1/k),    n = S x L / L0
    detectable |Δ| = (t_{k−1}(1 − α / 2m) + t_{k−1}(0.8)) se_Δ

with S the nulls' sequences, L their tokens at that layer and the three variances per unit
of design (one sequence of L0 = 32 tokens) measured on SmolLM2-135M (sweep/budget/variances.json,
made from docs/real/*.json by benchmarks/power_variances.py). A test whose (observable, layer,
kind) was not measured takes the nearest measured layer of that observable and, for a kind
never swept there, the larger variance of the kinds that were; the line says which.

`proposals` spends the same core-seconds on another split between null seeds and sequences per
seed, and proposes the split with the smallest worst detectable |Δ| when it is at least 5 %
smaller: each seed pays its own layer set-up, loads and tasks, so more seeds with fewer tokens
each win only where the seeds' spread (v_seed) outweighs the sampling error.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

VARIANCES = Path(__file__).with_name("variances.json")
POWER = 0.8


@dataclass(frozen=True)
class TestPower:
    """One declared test's design and the smallest |Δ| it detects."""

    model: str                      # the trained model the test reads
    observable: str
    layer: int
    kind: str
    k: int                          # nulls of the kind
    sequences: int                  # the nulls' sequences (the trained value is read on them)
    tokens: int                     # their tokens at the layer
    se: float                       # se_Δ of the design (nan: no variance measured)
    detectable: float               # |Δ| detected with POWER at α / m (inf: k < 2)
    source: str                     # where the variances come from

    def line(self) -> str:
        head = f"  {self.model} {self.observable:<14} layer {self.layer:>3}  {self.kind:<15}"
        if not self.k:
            return f"{head} {self.source}"
        head += f" k = {self.k:<3} {self.sequences} x {self.tokens} tokens:"
        if not math.isfinite(self.se):
            return f"{head} no variance measured on SmolLM2"
        found = f"{self.detectable:.3g}" if math.isfinite(self.detectable) else "none (k < 2)"
        return f"{head} se_Δ {self.se:.3g}, detectable |Δ| >= {found}  [{self.source}]"


def variance_rows() -> list[dict]:
    return json.loads(VARIANCES.read_text())["rows"]


def variances(observable: str, layer: int, kind: str, rows: list[dict]) -> tuple[dict | None, str]:
    """The measured variances for (observable, layer, kind), or the nearest stand-in, and where
    they come from."""
    mine = [r for r in rows if r["observable"] == observable]
    if not mine:
        return None, "not measured"
    near = min({r["layer"] for r in mine}, key=lambda x: (abs(x - layer), x))
    at = [r for r in mine if r["layer"] == near]
    same = [r for r in at if r["kind"] == kind]
    where = "" if near == layer else f"layer {near}'s"
    if same:
        return same[0], (f"{where} " if where else "") + f"SmolLM2 k = {same[0]['k']}"
    worst = max(at, key=lambda r: r["v_null"] + r["v_seed"])
    return worst, f"{where + ' ' if where else ''}{worst['kind']}'s: {kind} not measured"


def se_delta(v: dict, k: int, sequences: int, tokens: int, L0: int = 32) -> float:
    n = sequences * tokens / L0
    return math.sqrt(v["v_trained"] / n + (v["v_seed"] + v["v_null"] / n) * (1 + 1 / k))


def detectable(se: float, k: int, alpha: float, m: int) -> float:
    """|Δ| that the t(k − 1) test rejects at α / m (two-sided) with POWER."""
    from scipy import stats

    if k < 2:
        return math.inf
    dof = k - 1
    return float((stats.t.ppf(1 - alpha / (2 * m), dof) + stats.t.ppf(POWER, dof)) * se)


def variant(m) -> tuple[str, str, str] | None:
    """(role, kind, of) of a planned model that is a null or an ensemble member, else None."""
    v = m.variant
    return None if v is None else (v.role, v.kind, v.of)


def nulls_of(plan, name: str, kind: str) -> list:
    return [m for m in plan.models if variant(m) == ("null", kind, name)]


@dataclass(frozen=True)
class Family:
    """The declared family as the power lines read it."""

    tests: list                     # (observable, layer, kind), the study's order
    alpha: float                    # 1 − the study's level
    m: int                          # the family's size, Holm's first divisor
    rows: list                      # the measured variances


def family(plan, rows: list[dict] | None = None) -> Family | None:
    """The plan's declared family (None without `study:`); `rows`: the variances, default
    sweep/budget/variances.json."""
    study = getattr(plan.config, "study", None)
    if study is None:
        return None
    tests = study.tests()
    return Family(tests, 1 - study.level, len(tests), rows if rows is not None else variance_rows())


def trained_with_nulls(plan) -> list:
    """The plan's trained models that have nulls (an fp32 twin without any tests nothing)."""
    of = {v[2] for v in map(variant, plan.models) if v and v[0] == "null"}
    return [t for t in plan.models if variant(t) is None and t.name in of]


def design(plan, rows: list[dict] | None = None) -> tuple[TestPower, ...]:
    """Every declared test of every trained model with nulls: its design and power."""
    f = family(plan, rows)
    if f is None:
        return ()
    return tuple(_test(plan, trained, o, layer, kind, f.rows, f.alpha, f.m)
                 for trained in trained_with_nulls(plan) for o, layer, kind in f.tests)


def _test(plan, trained, observable, layer, kind, rows, alpha, m, k=None, sequences=None):
    nulls = nulls_of(plan, trained.name, kind)
    if not nulls:
        return TestPower(trained.name, observable, layer, kind, 0, 0, 0, math.nan, math.nan,
                         f"the plan has no {kind} nulls")
    k = len(nulls) if k is None else k
    S = min(plan.config.inputs.sequences, nulls[0].tokens.shape[0]) if sequences is None else sequences
    tokens = dict(nulls[0].rows).get(layer, 0)
    v, source = variances(observable, layer, kind, rows)
    if v is None or not tokens:
        return TestPower(trained.name, observable, layer, kind, k, S, tokens, math.nan, math.nan, source)
    se = se_delta(v, k, S, tokens)
    return TestPower(trained.name, observable, layer, kind, k, S, tokens, se,
                     detectable(se, k, alpha, m), source)


def proposals(plan, workers: int, rows: list[dict] | None = None) -> tuple[str, ...]:
    """Per (trained model, kind): a split of the same null core-seconds between seeds and
    sequences per seed whose detectable |Δ| is >= 5 % smaller for every declared test."""
    f = family(plan, rows)
    if f is None:
        return ()
    out = []
    for trained in trained_with_nulls(plan):
        for kind in sorted({k for _, _, k in f.tests}):
            nulls = nulls_of(plan, trained.name, kind)
            line = _best_split(plan, trained, kind, nulls, f, workers) if nulls else ""
            if line:
                out.append(line)
    return tuple(out)


def _best_split(plan, trained, kind, nulls, f: Family, workers) -> str:
    from sweep.budget.time import sweep_seconds

    def cost(S: int) -> float:                # one seed's core-seconds on S sequences
        one = dataclasses.replace(nulls[0], tokens=trained.tokens[:S])
        parts = sweep_seconds(dataclasses.replace(plan, models=(one,)), workers).parts
        return sum(v for term, v in parts.items() if term != "worker start")

    def detectables(k: int, S: int) -> list[float]:     # every test of the kind, in order
        found = [_test(plan, trained, o, layer, kd, f.rows, f.alpha, f.m, k, S)
                 for o, layer, kd in f.tests if kd == kind]
        return [t.detectable for t in found if math.isfinite(t.se)]

    k0, S0 = len(nulls), min(plan.config.inputs.sequences, nulls[0].tokens.shape[0])
    budget, now = k0 * cost(S0), detectables(k0, S0)
    if not now:
        return ""
    best = (1.0, k0, S0, 1.0)            # (worst ratio to today's, k, S, median ratio)
    for S in range(1, trained.tokens.shape[0] + 1):
        k = int(budget // cost(S))
        if k < 2 or (k, S) == (k0, S0):
            continue
        ratios = sorted(d / d0 for d, d0 in zip(detectables(k, S), now))
        if ratios[-1] < best[0]:
            best = (ratios[-1], k, S, ratios[len(ratios) // 2])
    worst, k, S, median = best
    if worst > 0.95:
        return ""
    return (f"  {trained.name} {kind}: k = {k} nulls on {S} sequence(s) instead of k = {k0} on "
            f"{S0}, for the same null core-seconds ({budget / 60:.3g} core-min): every test's "
            f"detectable |Δ| x {worst:.2f} or less (median x {median:.2f})")
