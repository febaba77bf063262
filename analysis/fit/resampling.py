"""Which tokens a bootstrap replicate draws: whole sequences, circular blocks, or single tokens.

Neighbouring tokens share their context, so their spectra are correlated: a bootstrap that
draws single tokens i.i.d. treats N correlated tokens as N independent ones and its
intervals are too narrow (measured in docs/analysis.md, "Uncertainty"). The unit here is
chosen by a documented rule (`resampling_for`):

- **A jackknife over sequences** whenever there are at least 2 of them (`unit="auto"`).
  Sequences (documents) differ from each other more than token blocks within one do, and
  only a unit as large as a sequence carries that variance. Each of the S replicates leaves
  one sequence out; the interval is θ ± t_{S−1} · se_jack, se_jack² = (S−1)/S Σ (θ_(i) − θ̄)²
  (Efron & Stein 1981: not biased low, unlike the plug-in variance of a bootstrap), and
  Student's t with S − 1 degrees of freedom makes few sequences widen the interval, as they
  should. Chosen by measurement (benchmarks/sequence_coverage.py, docs/analysis.md): 8
  sequences with their own exponents, nominal 90 %: circular blocks cover 0.66, a bootstrap
  over whole sequences 0.73, this jackknife 0.85–0.90.
- **Whole sequences drawn with replacement** only when asked (`unit="sequences"`), as the
  comparison above.
- **Circular blocks of k contiguous tokens** for a single sequence (which says so in its
  rule: no between-sequence variance can be measured from one), or when asked (Politis & Romano 1992, the moving
  block bootstrap with each sequence wrapped onto a circle so that tokens at a sequence's
  ends are drawn as often as the others; plain moving blocks under-draw them, which shifts
  the replicates' centre). A block never mixes two sequences; a replicate draws its blocks
  from the blocks of all sequences pooled, so sequences mix across replicates.
  k = 2 × the Politis–White automatic block length (Politis & White 2004, with the
  correction of Patton, Politis & White 2009, circular-bootstrap constant), computed from
  the autocorrelation of a per-token series (`influence`: each token's linearised
  contribution to the statistic), pooled over sequences about the grand mean, so that a
  difference of level between sequences reads as long-range correlation and lengthens the
  blocks. Politis–White minimises the mean squared error of the variance; the factor 2
  trades some of that for less downward bias (≈ −Σ|m|R(m) / (k·Σ R(m))), which is what an
  interval's coverage needs. k is capped at the shortest sequence and at N/4 (≥ 4 blocks).
- **Single tokens** only when asked (`unit="tokens"`), as the comparison that shows why not.

The number of independent units the spread is learned from (sequences, N/k blocks, N
tokens) is reported as `n_units`. Bootstrap intervals (`Resampling.interval`) are percentile intervals
stretched about the point estimate to undo the replicates' known downward bias of variance
and by Student's t with the variance's effective degrees of freedom (n_units − 1, fewer
when the units' sums are heavy-tailed).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from analysis._plot import axes_or_new
from analysis.fit.block_length import effective_dof, politis_white

BLOCK_FACTOR = 2        # k = BLOCK_FACTOR × Politis–White length
UNITS = ("auto", "jackknife", "sequences", "blocks", "tokens")


@dataclass
class Resampling:
    """A resampling plan over N tokens in token order (grouped by sequence)."""
    kind: str                  # "jackknife" | "sequences" | "blocks" | "tokens"
    block_length: int          # tokens per block: 1 for single tokens, 0 for whole sequences
    seq: np.ndarray = field(repr=False)     # (N,) sequence id of each token, grouped
    n_units: float = 0.0       # independent units: sequences, N/k blocks or N tokens
    rule: str = ""             # how kind and block_length were chosen, in words
    acf: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)  # ρ(lag) used for k
    variance_factor: float = 1.0   # replicate variance × this = the estimate (see `interval`)
    dof: float = np.inf        # degrees of freedom of that variance (see `effective_dof`)

    @property
    def n_tokens(self) -> int:
        return len(self.seq)

    @property
    def n_seqs(self) -> int:
        return len(np.unique(self.seq))

    @property
    def unit(self) -> str:
        """What one draw is (one left out, for the jackknife), and the interval's law, in words."""
        if self.kind == "jackknife":
            return f"jackknife over {self.n_seqs} sequences, t({self.n_seqs - 1})"
        return {"sequences": "sequences", "tokens": "single tokens (i.i.d.)"}.get(
            self.kind, f"circular blocks of {self.block_length} tokens")

    @property
    def jackknife(self) -> bool:
        return self.kind == "jackknife"

    def plot(self, ax=None):
        """The measured autocorrelation that set k, with k marked."""
        ax = axes_or_new(ax)
        if len(self.acf):
            ax.plot(np.arange(len(self.acf)), self.acf, "o-", ms=3, label="ρ(lag), influence series")
        if self.kind == "blocks":
            ax.axvline(self.block_length, color="C3", ls="--", label=f"k = {self.block_length}")
        ax.axhline(0, color="k", lw=0.6)
        ax.set_xlabel("lag (tokens)")
        ax.set_ylabel("autocorrelation")
        ax.set_title(self.unit, fontsize=9)
        ax.legend(fontsize=8)
        return ax

    def interval(self, point, replicates, level):
        """(lo, hi): for the jackknife, point ± t_{S−1} · se_jack; else the percentile interval
        of `replicates`, each side stretched about `point` by √variance_factor · t_dof/z (NaN
        with fewer than 2 units).

        variance_factor undoes the known downward biases of the replicates' variance: each
        replicate's units are centred on the sample's own mean, which removes a share
        1/n_units of the variance (hence n/(n−1) for n sequences, 1/(1 − k/N) for blocks), and
        blocks cut the correlation at their ends, a share G/(k·g) more (Künsch 1989; Lahiri
        2003, Thm 3.1; G/g from the autocorrelation that set k).
        Student's t: the spread itself is learned from n_units independent units, fewer in
        effect when their sums are heavy-tailed (`effective_dof`)."""
        r = np.asarray(replicates, np.float64)
        r = r[np.isfinite(r)]
        if self.n_units < 2 or len(r) < 2:
            return np.nan, np.nan
        q = (1 + level) / 2
        if self.jackknife:
            h = stats.t.ppf(q, self.dof) * self.se(r)
            return float(point - h), float(point + h)
        lo, hi = np.quantile(r, [1 - q, q])
        c = self.stretch(level)
        return float(point - (point - lo) * c), float(point + (hi - point) * c)

    def se(self, replicates) -> float:
        """The standard error the replicates give: the jackknife's √((S−1)/S Σ(θ_(i) − θ̄)²),
        or the bootstrap replicates' sd times √variance_factor (NaN with < 2 finite ones)."""
        r = np.asarray(replicates, np.float64)
        r = r[np.isfinite(r)]
        if len(r) < 2:
            return np.nan
        if self.jackknife:
            return float(np.sqrt((len(r) - 1) / len(r) * ((r - r.mean()) ** 2).sum()))
        return float(r.std() * np.sqrt(self.variance_factor))

    def covariance(self, replicates) -> np.ndarray:
        """(p, p) the covariance of a vector statistic from its replicates (B, p), on the same
        footing as `se` (jackknife (S−1)/S Σ outer products, or the bootstrap's × variance_factor);
        rows with a non-finite entry are dropped."""
        r = np.asarray(replicates, np.float64)
        r = r[np.isfinite(r).all(1)]
        d = r - r.mean(0)
        scale = (len(r) - 1) / len(r) if self.jackknife else self.variance_factor / max(len(r), 1)
        return scale * d.T @ d

    def stretch(self, level) -> float:
        """The factor a bootstrap `interval` stretches each side by: √variance_factor · t_dof/z
        (1 for the jackknife, whose interval is not a percentile one)."""
        if self.jackknife:
            return 1.0
        q = (1 + level) / 2
        return float(np.sqrt(self.variance_factor) * stats.t.ppf(q, self.dof) / stats.norm.ppf(q))

    def replicate_sums(self, values, n_boot, seed=0) -> np.ndarray:
        """(n_boot, p) per-replicate sums of an additive per-token quantity `values` (N, p).

        Replicates hold about N tokens (round(N/k) blocks of k; the jackknife's S replicates,
        n_boot and seed unused, each all sequences but one); every statistic built on them
        here is a ratio or a log-slope, which a common factor does not change."""
        v = np.asarray(values, np.float64).reshape(self.n_tokens, -1)      # (N, p)
        rng = np.random.default_rng(seed)
        if self.jackknife:
            return v.sum(0) - _sequence_sums(v, self.seq)                    # (S, p)
        if self.kind == "sequences":
            units = np.stack([v[self.seq == s].sum(0) for s in np.unique(self.seq)])  # (n_seq, p)
            n_draw = len(units)
        else:
            units = _circular_block_sums(v, self.seq, max(self.block_length, 1))   # (N, p)
            n_draw = max(1, round(self.n_tokens / max(self.block_length, 1)))
        return _draw_sums(units, n_draw, n_boot, rng)

    def sum_variance(self, values) -> np.ndarray:
        """(p,) the variance of `replicate_sums(values)` over every replicate the plan can
        draw, in closed form (n_draw units drawn uniformly: n_draw × the units' variance), times
        `variance_factor` as `interval` applies it: the plan's variance of a sum, with no draws
        and so no seed. For a point estimate's weights; the intervals still come from draws."""
        v = np.asarray(values, np.float64).reshape(self.n_tokens, -1)      # (N, p)
        if self.kind in ("sequences", "jackknife"):
            # the jackknife's variance of a sum of S independent sequences: S · s²(unbiased)
            units = _sequence_sums(v, self.seq)
            n_draw = len(units)
        else:
            units = _circular_block_sums(v, self.seq, max(self.block_length, 1))
            n_draw = max(1, round(self.n_tokens / max(self.block_length, 1)))
        return n_draw * units.var(0) * self.variance_factor


def _sequence_sums(v, seq):
    """(S, p): the sum of v (N, p) over each sequence, in order of sequence id."""
    return np.stack([v[seq == s].sum(0) for s in np.unique(seq)])


def _circular_block_sums(v, seq, k):
    """(N, p): the sum of the k tokens starting at each token, wrapping within its sequence."""
    out = np.empty_like(v)
    for s in np.unique(seq):
        idx = np.nonzero(seq == s)[0]
        x = v[idx]                                                   # (n_s, p)
        reps = -(-(len(x) + k) // len(x))                            # wrap more than once if k > n_s
        c = np.concatenate([np.zeros((1, v.shape[1])), np.cumsum(np.tile(x, (reps, 1)), 0)])
        out[idx] = c[k:k + len(x)] - c[:len(x)]
    return out


def _draw_sums(units, n_draw, n_boot, rng):
    """(n_boot, p): sums of n_draw units drawn uniformly with replacement, per replicate.
    Few draws (blocks): gather the drawn units; many (single tokens): a (chunk, n_units)
    count matrix times the units, chunked to stay ~32 MB. The draws are the same either way."""
    n, p = units.shape
    chunk = max(1, min(n_boot, 2 ** 22 // max(n_draw * p if n_draw < n else n, 1)))
    out = np.empty((n_boot, p))
    for b0 in range(0, n_boot, chunk):
        c = min(chunk, n_boot - b0)
        draws = rng.integers(0, n, size=(c, n_draw))
        if n_draw < n:
            out[b0:b0 + c] = units[draws].sum(1)
        else:
            flat = (draws + n * np.arange(c)[:, None]).ravel()
            out[b0:b0 + c] = np.bincount(flat, minlength=c * n).reshape(c, n).astype(np.float64) @ units
    return out


def difference_interval(a, reps_a, plan_a, b, reps_b, plan_b, level) -> tuple:
    """(a − b, lo, hi) from each side's replicates and Resampling plan (`difference_law` says
    which distribution the interval, and so its p, comes from)."""
    d, se, dof, reps = _difference(a, reps_a, plan_a, b, reps_b, plan_b, level)
    if not np.isfinite(d):
        return float(d), np.nan, np.nan
    q = (1 + level) / 2
    if reps is None:
        h = stats.t.ppf(q, dof) * se
        return (float(d), float(d - h), float(d + h)) if np.isfinite(h) else (float(d), np.nan, np.nan)
    if len(reps) < 2:
        return float(d), np.nan, np.nan
    lo, hi = np.quantile(reps, [1 - q, q])
    return float(d), float(lo), float(hi)


def difference_law(a, reps_a, plan_a, b, reps_b, plan_b, level=0.9) -> dict:
    """How `difference_interval` reads a − b: {"method", "se", "dof", "replicates"}: "t" with
    se and dof when a side is a jackknife (paired over the same sequences: t(S−1) of the
    per-sequence differences; else Welch–Satterthwaite), "bootstrap" with the (B,) stretched
    replicates of a − b otherwise."""
    d, se, dof, reps = _difference(a, reps_a, plan_a, b, reps_b, plan_b, level)
    if reps is None:
        return {"method": "t", "se": se, "dof": dof, "replicates": None}
    return {"method": "bootstrap", "se": float(np.std(reps)) if len(reps) else np.nan,
            "dof": np.inf, "replicates": reps}


def _difference(a, reps_a, plan_a, b, reps_b, plan_b, level):
    """(d, se, dof, None) for a t reading, (d, nan, inf, stretched replicates) for a bootstrap.

    Bootstrap sides drawn independently, each stretched as its own interval is
    (`Resampling.interval`): replicates (a − b) + c_a (a* − a) − c_b (b* − b). A jackknife
    pair over the same sequence ids is paired: the sequences' own effect, shared by both
    models, cancels in (a_(i) − b_(i))."""
    d = a - b
    ra, rb = np.asarray(reps_a, np.float64), np.asarray(reps_b, np.float64)
    if not (plan_a.jackknife or plan_b.jackknife):
        reps = d + plan_a.stretch(level) * (ra - a) - plan_b.stretch(level) * (rb - b)
        return d, np.nan, np.inf, reps[np.isfinite(reps)]
    same = plan_a.jackknife and plan_b.jackknife and len(ra) == len(rb) \
        and np.array_equal(np.unique(plan_a.seq), np.unique(plan_b.seq))
    if same:
        return d, plan_a.se(ra - rb), float(len(ra) - 1), None
    va, vb = plan_a.se(ra) ** 2, plan_b.se(rb) ** 2
    dof = (va + vb) ** 2 / (va ** 2 / plan_a.dof + vb ** 2 / plan_b.dof)   # Welch–Satterthwaite
    return d, float(np.sqrt(va + vb)), float(dof), None


def verdict(lo, hi, level, p_adjusted=None) -> str:
    """What a difference says: "differ", "no difference shown at 90 %", or "not fitted".
    Within a family of tests (multiplicity.py, p_adjusted given), from its Holm-adjusted p:
    "differ" when p_adjusted < 1 − level. Alone, from its CI, which is uncorrected: "CI
    excludes 0 (uncorrected)", never "differ", which only a corrected p says."""
    if not np.isfinite(lo):
        return "not fitted"
    shown = f"no difference shown at {level * 100:g} %"
    if p_adjusted is not None and np.isfinite(p_adjusted):
        return "differ" if p_adjusted < 1 - level else shown
    return shown if lo <= 0 <= hi else "CI excludes 0 (uncorrected)"


def group_by_sequence(seq, n):
    """(order, seq): a stable order that groups entries by sequence id, token order kept."""
    s = np.zeros(n, np.int64) if seq is None else np.asarray(seq).ravel()
    if len(s) != n:
        raise ValueError(f"seq has {len(s)} entries for {n} tokens")
    if len(s) < 2 or (s[1:] >= s[:-1]).all():     # already grouped: no copy of the data
        return np.arange(len(s)), s
    order = np.argsort(s, kind="stable")
    return order, s[order]


def resampling_for(influence, seq, unit="auto", block_length=None) -> Resampling:
    """The plan for tokens with per-token series `influence` (N,) and ids `seq` (N,), grouped.

    unit: "auto" (the module rule: the jackknife over ≥ 2 sequences, else blocks), "jackknife",
    "sequences" (a bootstrap of whole sequences), "blocks" or "tokens"; block_length forces k
    (and so blocks). A single sequence always falls back to blocks, and its rule says so."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, not {unit!r}")
    seq = np.asarray(seq)
    n, n_seq = len(seq), len(np.unique(seq))
    if unit == "tokens":
        return Resampling("tokens", 1, seq, float(n), "single tokens i.i.d. (asked for)",
                          dof=effective_dof(influence, n))
    sums = np.bincount(np.unique(seq, return_inverse=True)[1], weights=influence)
    if n_seq >= 2 and (unit == "jackknife" or (unit == "auto" and block_length is None)):
        why = "asked for" if unit == "jackknife" else f"{n_seq} ≥ 2 sequences"
        return Resampling("jackknife", 0, seq, float(n_seq),
                          f"jackknife over {n_seq} sequences, each left out once; interval "
                          f"θ ± t({n_seq - 1})·se ({why})",
                          variance_factor=n_seq / max(n_seq - 1, 1), dof=max(n_seq - 1, 1))
    if unit == "sequences":
        return Resampling("sequences", 0, seq, float(n_seq), "whole sequences (asked for)",
                          variance_factor=n_seq / max(n_seq - 1, 1), dof=effective_dof(sums, n_seq))
    lengths = np.bincount(np.unique(seq, return_inverse=True)[1])
    k_pw, acf, g_ratio = politis_white(influence, seq)
    if block_length is None:
        k = int(np.clip(BLOCK_FACTOR * k_pw, 1, max(1, min(lengths.min(), n // 4))))
        why = (("1 sequence: no between-sequence variance can be measured, so blocks within it; "
                if n_seq == 1 else "") +
               f"k = {BLOCK_FACTOR} × Politis–White length {k_pw} of the per-token influence "
               f"series' autocorrelation (cap: shortest sequence {lengths.min()}, N/4 = {n // 4})")
    else:
        k, why = int(block_length), "k asked for"
    sums = _circular_block_sums(np.asarray(influence, np.float64)[:, None], seq, k)[:, 0]
    return Resampling("blocks", k, seq, n / k,
                      f"circular blocks of {k} tokens within each of {n_seq} sequence(s); {why}",
                      acf, (1 + g_ratio / k) / max(1 - k / n, 0.5), effective_dof(sums, n / k))


def log_slope_influence(values, logx):
    """(N,) each token's linearised contribution to the least-squares slope of
    log Σ_t values[t, j] on logx[j] (points with a zero total skipped). A normaliser common to
    all points (a kernel's mode count) only shifts the line, so it does not enter."""
    v = np.asarray(values, np.float64)                                   # (N, p)
    tot = v.sum(0)
    ok = tot > 0
    if ok.sum() < 2:
        return np.zeros(len(v))
    dx = logx[ok] - logx[ok].mean()
    return v[:, ok] @ (dx / tot[ok])


def named_seed(name: str, seed: int) -> int:
    """A resampling seed of its own for `name` (a model), stable across runs and machines
    (SHA-256, not Python's salted hash): every report that resamples that model draws the
    same replicates, so its section and a comparison print the same interval."""
    return int.from_bytes(hashlib.sha256(f"{name}\0{int(seed)}".encode()).digest()[:8], "little")
