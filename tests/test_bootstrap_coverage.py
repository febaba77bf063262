"""Coverage of β's bootstrap CI on serially correlated spectra of known population β.

Each token draws D rates from ρ ∝ λ^(s_t − 1) on (0, LAM_MAX], and its exponent drifts along
the sequence: s_t = 1 + BETA0 + SIGMA·a_t with a_t a stationary AR(1) of coefficient PHI, so
neighbouring tokens' spectra are correlated as they are in a model sharing its context. The
population value is the grid fit of the expected N(<λ) = N_tok·D·E_a[(λ/LAM_MAX)^s], the
expectation over a ~ N(0, 1) taken by Gauss–Hermite quadrature.
"""
import numpy as np
import pytest
from scipy import stats
from scipy.signal import lfilter

from analysis import bootstrap_ir_exponent, bootstrap_ir_from_hists
from analysis.fit.bootstrap import _slopes
from analysis.fit.resampling import difference_interval, difference_law, resampling_for
from analysis.spectrum.rates import (BINS_PER_DECADE, EDGES, LOG10_LO, N_COLS, grid_indices,
                                     histogram_rows)

WINDOW = (1e-4, 5e-2)
LAM_MAX, BETA0, SIGMA, PHI = 0.06, -0.2, 0.12, 0.8
N_SEQ, N_TOK, D = 2, 512, 64


def ar1(rng, n_seq, n_tok, phi):
    """(n_seq, n_tok) stationary AR(1) with unit variance."""
    e = rng.normal(size=(n_seq, n_tok))
    e[:, 1:] *= np.sqrt(1 - phi ** 2)                  # a_0 = e_0, a_t = φ a_{t−1} + √(1−φ²) e_t
    return lfilter([1.0], [1.0, -phi], e, axis=1)


def drifting_spectra(rng, phi=PHI, sigma=SIGMA, n_seq=N_SEQ, offsets=None, n_tok=N_TOK):
    """(n_seq·n_tok, D) rates in token order, sequence after sequence, and their seq ids."""
    s = 1 + BETA0 + sigma * ar1(rng, n_seq, n_tok, phi)                 # (seq, tok)
    if offsets is not None:
        s = s + np.asarray(offsets)[:, None]
    lam = LAM_MAX * rng.random((n_seq, n_tok, D)) ** (1 / s[..., None])
    return lam.reshape(-1, D), np.repeat(np.arange(n_seq), n_tok)


def sequence_spectra(rng, n_seq, tau, n_tok=128):
    """Rates and seq ids of n_seq sequences, each with its own exponent: s_t as
    `drifting_spectra` plus τ·u_q, u_q ~ N(0, 1) per sequence; population β at sd √(σ² + τ²)."""
    return drifting_spectra(rng, n_seq=n_seq, offsets=tau * rng.normal(size=n_seq), n_tok=n_tok)


def token_hists(rates):
    """(tokens, N_COLS) histograms on the global edges; the bin from log10 λ directly (the
    data here are continuous, so ties with an edge have probability 0), faster than
    `histogram_rows` for the hundreds of data sets below."""
    col = np.floor((np.log10(rates) - LOG10_LO) * BINS_PER_DECADE).astype(np.int64) + 1
    col += N_COLS * np.arange(len(rates))[:, None]
    return np.bincount(col.ravel(), minlength=len(rates) * N_COLS).reshape(len(rates), N_COLS)


def population_beta(sigma=SIGMA):
    z, w = np.polynomial.hermite_e.hermegauss(80)
    x = EDGES[grid_indices(WINDOW)]
    n = ((x / LAM_MAX) ** (1 + BETA0 + sigma * z[:, None]) * (w / w.sum())[:, None]).sum(0)
    return float(_slopes(np.log10(x), n[None])[0] - 1)


def coverage(n_sets, seed, n_boot=300, level=0.9, sigma=SIGMA):
    """Fractions of data sets whose interval covers the population β: (circular blocks,
    single tokens), the within-sequence comparison (no between-sequence variance here)."""
    rng = np.random.default_rng(seed)
    truth = population_beta(sigma)
    hits, hits_iid, ks = 0, 0, []
    for i in range(n_sets):
        rates, seq = drifting_spectra(rng, sigma=sigma)
        h = token_hists(rates)                                             # (tokens, col)
        new = bootstrap_ir_from_hists(h, WINDOW, n_boot, level, seed=i, seq=seq, unit="blocks")
        old = bootstrap_ir_from_hists(h, WINDOW, n_boot, level, seed=i, seq=seq, unit="tokens")
        hits += new.covers(truth)
        hits_iid += old.covers(truth)
        ks.append(new.block_length)
    return hits / n_sets, hits_iid / n_sets, np.array(ks)


def test_correlated_tokens_nominal_90_covers_85_to_95_and_iid_tokens_do_not():
    """The documented comparison (docs/analysis.md, Uncertainty): 300 data sets."""
    cov_new, cov_iid, ks = coverage(300, seed=2026)
    print(f"coverage of nominal 90 %: blocks {cov_new:.3f} (k median {np.median(ks):.0f}), "
          f"single tokens {cov_iid:.3f}")
    assert 0.85 <= cov_new <= 0.95, cov_new
    assert cov_iid < 0.75, cov_iid
    assert 10 <= np.median(ks) <= 128


def test_sequences_with_their_own_exponents_jackknife_covers_and_blocks_do_not():
    """8 sequences, each with its own exponent (τ = 0.1), 300 data sets, nominal 90 %
    (benchmarks/sequence_coverage.py measures the other units): the jackknife over sequences
    with t(7) covers ≥ 0.83; circular blocks, blind to the sequences' offsets, do not."""
    rng = np.random.default_rng(2027)
    truth = population_beta(np.hypot(SIGMA, 0.1))
    hits = {"jackknife": 0, "blocks": 0}
    for i in range(300):
        rates, seq = sequence_spectra(rng, 8, 0.1)
        h = token_hists(rates)
        for unit in hits:
            hits[unit] += bootstrap_ir_from_hists(h, WINDOW, 200, 0.9, seed=i, seq=seq,
                                                  unit=unit).covers(truth)
    cov = {u: v / 300 for u, v in hits.items()}
    print(f"coverage of nominal 90 % with 8 sequences: {cov}")
    assert 0.83 <= cov["jackknife"] <= 0.96, cov
    assert cov["blocks"] < 0.8, cov


def test_the_unit_follows_the_sequences_and_says_so():
    """≥ 2 sequences: the jackknife, t(S − 1), which widens as S falls; 1 sequence: circular
    blocks, and the rule says why."""
    rng = np.random.default_rng(8)
    rates, seq = sequence_spectra(rng, 8, 0.0)
    h = token_hists(rates)
    b8 = bootstrap_ir_from_hists(h, WINDOW, 100, 0.9, seq=seq)
    b2 = bootstrap_ir_from_hists(h, WINDOW, 100, 0.9, seq=seq // 4)         # the same tokens, 2 sequences
    b1 = bootstrap_ir_from_hists(h, WINDOW, 100, 0.9, seq=np.zeros_like(seq))
    assert b8.unit == "jackknife over 8 sequences, t(7)" and b8.n_boot == 8 and b8.dof == 7
    assert b2.unit == "jackknife over 2 sequences, t(1)"
    assert "jackknife over 8 sequences" in b8.method and "t(7)" in b8.method
    assert b2.hi - b2.lo > 2 * (b8.hi - b8.lo)                              # t(1) against t(7)
    assert b1.unit.startswith("circular blocks") and b1.rule.startswith(
        "circular blocks") and "1 sequence: no between-sequence variance" in b1.rule
    # the jackknife's interval is β ± t(7)·se, se from the 8 leave-one-out fits by hand
    loo = [bootstrap_ir_from_hists(h[seq != q], WINDOW, 10, 0.9, seq=seq[seq != q]).beta
           for q in range(8)]
    se = np.sqrt(7 / 8 * ((np.array(loo) - np.mean(loo)) ** 2).sum())
    np.testing.assert_allclose([b8.lo, b8.hi], b8.beta + np.array([-1, 1]) * stats.t.ppf(0.95, 7) * se,
                               rtol=1e-9)
    assert b8.se == pytest.approx(se, rel=1e-9)


def test_rates_path_and_histogram_path_give_the_same_interval():
    rates, seq = drifting_spectra(np.random.default_rng(1))
    assert (token_hists(rates) == histogram_rows(rates)).all()
    a = bootstrap_ir_exponent(list(rates), WINDOW, n_boot=200, seed=3, seq=seq, unit="blocks")
    b = bootstrap_ir_from_hists(histogram_rows(rates), WINDOW, n_boot=200, seed=3, seq=seq,
                                unit="blocks")
    assert (a.lo, a.hi, a.block_length, a.unit) == (b.lo, b.hi, b.block_length, b.unit)
    assert a.fit.s == b.fit.s
    assert a.unit == f"circular blocks of {a.block_length} tokens" and a.n_seqs == 2
    assert a.level == 0.9 and a.n_boot == 200 and a.window == WINDOW
    assert "circular blocks" in a.rule and "Politis–White" in a.rule


def test_token_order_given_interleaved_is_grouped_by_sequence():
    rates, seq = drifting_spectra(np.random.default_rng(4))
    i = np.argsort(np.tile(np.arange(N_TOK), N_SEQ), kind="stable")        # t0 s0, t0 s1, t1 s0 …
    a = bootstrap_ir_exponent(list(rates), WINDOW, n_boot=100, seed=0, seq=seq, unit="blocks")
    b = bootstrap_ir_exponent(list(rates[i]), WINDOW, n_boot=100, seed=0, seq=seq[i], unit="blocks")
    c = bootstrap_ir_exponent(list(rates), WINDOW, seq=seq)
    d = bootstrap_ir_exponent(list(rates[i]), WINDOW, seq=seq[i])
    assert (a.lo, a.hi) == (b.lo, b.hi)
    assert (c.lo, c.hi) == (d.lo, d.hi) and c.unit.startswith("jackknife")


def test_block_length_follows_the_measured_correlation():
    rng = np.random.default_rng(5)
    k = {}
    for phi in (0.0, 0.8, 0.95):
        rates, seq = drifting_spectra(rng, phi=phi)
        k[phi] = bootstrap_ir_from_hists(histogram_rows(rates), WINDOW, 50, seq=seq,
                                         unit="blocks").block_length
    assert k[0.0] <= 6 < k[0.8] < k[0.95], k


def test_sequence_offsets_lengthen_blocks_and_many_sequences_are_resampled_whole():
    rng = np.random.default_rng(6)
    rates, seq = drifting_spectra(rng, phi=0.0, n_seq=4)
    flat = bootstrap_ir_from_hists(histogram_rows(rates), WINDOW, 50, seq=seq, unit="blocks")
    rates, seq = drifting_spectra(rng, phi=0.0, n_seq=4, offsets=[-0.15, -0.05, 0.05, 0.15])
    shifted = bootstrap_ir_from_hists(histogram_rows(rates), WINDOW, 50, seq=seq, unit="blocks")
    assert shifted.block_length > 4 * max(flat.block_length, 1), (flat.block_length, shifted.block_length)
    many = resampling_for(np.ones(40 * 8), np.repeat(np.arange(40), 8), unit="sequences")
    assert many.kind == "sequences" and many.unit == "sequences" and many.n_units == 40
    auto = resampling_for(np.ones(3 * 8), np.repeat(np.arange(3), 8))
    assert auto.kind == "jackknife" and auto.n_units == 3 and auto.dof == 2


def test_replicates_of_whole_sequences_sum_whole_sequences():
    seq = np.repeat(np.arange(25), 4)
    plan = resampling_for(np.zeros(100), seq, unit="sequences")
    v = np.zeros((100, 1))
    v[seq == 3] = 1.0                                                      # only sequence 3 counts
    sums = plan.replicate_sums(v, 500, seed=0)[:, 0]
    assert set(np.unique(sums)) <= {0.0, 4.0, 8.0, 12.0, 16.0, 20.0}      # multiples of a sequence
    assert sums.mean() == pytest.approx(4.0, rel=0.15)                     # drawn 1 time in 25, 25 draws


@pytest.mark.parametrize("n_seq,unit", [(4, "blocks"), (30, "sequences")])
def test_the_closed_form_variance_of_a_replicate_sum_is_that_of_the_draws(n_seq, unit):
    """Resampling.sum_variance (the memory fits' seed-free weights) against the variance of
    20000 drawn replicate sums, whole sequences (30) and circular blocks (4 sequences): within
    6 %, the Monte-Carlo error of a variance from 20000 draws being about 1 %."""
    rng = np.random.default_rng(3)
    seq = np.repeat(np.arange(n_seq), 50)
    v = rng.normal(size=(len(seq), 3)) + np.repeat(rng.normal(size=(n_seq, 3)), 50, 0)  # (N, 3)
    plan = resampling_for(v[:, 0], seq, unit=unit)
    assert plan.kind == unit
    drawn = plan.replicate_sums(v, 20000, seed=1).var(0) * plan.variance_factor
    np.testing.assert_allclose(plan.sum_variance(v), drawn, rtol=0.06)


def test_jackknife_sum_variance_and_paired_difference():
    """The jackknife's variance of a sum is S·s² of the sequence sums (S independent
    sequences), its se of a mean that of the textbook jackknife; two models on the same
    sequences are paired, so a shared per-sequence effect cancels in their difference."""
    rng = np.random.default_rng(9)
    seq = np.repeat(np.arange(6), 30)
    effect = np.repeat(rng.normal(size=6) * 3, 30)                       # shared by both models
    x, y = effect + rng.normal(size=180), effect + 0.5 + rng.normal(size=180)
    plan = resampling_for(x - x.mean(), seq)
    sums = np.bincount(seq, weights=x)
    assert plan.sum_variance(x)[0] == pytest.approx(6 * sums.var(ddof=1))
    means = lambda v: (lambda s: s[:, 0] / s[:, 1])(plan.replicate_sums(np.c_[v, np.ones(180)], 0))  # noqa: E731
    rx, ry = means(x), means(y)
    assert len(rx) == 6
    paired = difference_interval(x.mean(), rx, plan, y.mean(), ry, plan, 0.9)
    law = difference_law(x.mean(), rx, plan, y.mean(), ry, plan, 0.9)
    assert law["method"] == "t" and law["dof"] == 5
    se = np.bincount(seq, weights=x - y).reshape(-1) / 30
    assert law["se"] == pytest.approx(se.std(ddof=1) / np.sqrt(6), rel=1e-9)
    unpaired = np.sqrt(plan.se(rx) ** 2 + plan.se(ry) ** 2)
    assert paired[2] - paired[1] < 0.5 * 2 * stats.t.ppf(0.95, 5) * unpaired    # effect cancelled
    assert paired[1] < -0.5 < paired[2]
