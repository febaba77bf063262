"""Coverage of β's bootstrap CI on serially correlated spectra of known population β.

Each token draws D rates from ρ ∝ λ^(s_t − 1) on (0, LAM_MAX], and its exponent drifts along
the sequence: s_t = 1 + BETA0 + SIGMA·a_t with a_t a stationary AR(1) of coefficient PHI, so
neighbouring tokens' spectra are correlated as they are in a model sharing its context. The
population value is the grid fit of the expected N(<λ) = N_tok·D·E_a[(λ/LAM_MAX)^s], the
expectation over a ~ N(0, 1) taken by Gauss–Hermite quadrature.
"""
import numpy as np
import pytest
from scipy.signal import lfilter

from analysis import bootstrap_ir_exponent, bootstrap_ir_from_hists
from analysis.fit.bootstrap import _slopes
from analysis.fit.resampling import resampling_for
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


def drifting_spectra(rng, phi=PHI, sigma=SIGMA, n_seq=N_SEQ, offsets=None):
    """(n_seq·N_TOK, D) rates in token order, sequence after sequence, and their seq ids."""
    s = 1 + BETA0 + sigma * ar1(rng, n_seq, N_TOK, phi)                 # (seq, tok)
    if offsets is not None:
        s = s + np.asarray(offsets)[:, None]
    lam = LAM_MAX * rng.random((n_seq, N_TOK, D)) ** (1 / s[..., None])
    return lam.reshape(-1, D), np.repeat(np.arange(n_seq), N_TOK)


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
    """Fractions of data sets whose interval covers the population β: (auto, single tokens)."""
    rng = np.random.default_rng(seed)
    truth = population_beta(sigma)
    hits, hits_iid, ks = 0, 0, []
    for i in range(n_sets):
        rates, seq = drifting_spectra(rng, sigma=sigma)
        h = token_hists(rates)                                             # (tokens, col)
        new = bootstrap_ir_from_hists(h, WINDOW, n_boot, level, seed=i, seq=seq)
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


def test_rates_path_and_histogram_path_give_the_same_interval():
    rates, seq = drifting_spectra(np.random.default_rng(1))
    assert (token_hists(rates) == histogram_rows(rates)).all()
    a = bootstrap_ir_exponent(list(rates), WINDOW, n_boot=200, seed=3, seq=seq)
    b = bootstrap_ir_from_hists(histogram_rows(rates), WINDOW, n_boot=200, seed=3, seq=seq)
    assert (a.lo, a.hi, a.block_length, a.unit) == (b.lo, b.hi, b.block_length, b.unit)
    assert a.fit.s == b.fit.s
    assert a.unit == f"circular blocks of {a.block_length} tokens" and a.n_seqs == 2
    assert a.level == 0.9 and a.n_boot == 200 and a.window == WINDOW
    assert "circular blocks" in a.rule and "Politis–White" in a.rule


def test_token_order_given_interleaved_is_grouped_by_sequence():
    rates, seq = drifting_spectra(np.random.default_rng(4))
    i = np.argsort(np.tile(np.arange(N_TOK), N_SEQ), kind="stable")        # t0 s0, t0 s1, t1 s0 …
    a = bootstrap_ir_exponent(list(rates), WINDOW, n_boot=100, seed=0, seq=seq)
    b = bootstrap_ir_exponent(list(rates[i]), WINDOW, n_boot=100, seed=0, seq=seq[i])
    assert (a.lo, a.hi) == (b.lo, b.hi)


def test_block_length_follows_the_measured_correlation():
    rng = np.random.default_rng(5)
    k = {}
    for phi in (0.0, 0.8, 0.95):
        rates, seq = drifting_spectra(rng, phi=phi)
        k[phi] = bootstrap_ir_from_hists(histogram_rows(rates), WINDOW, 50, seq=seq).block_length
    assert k[0.0] <= 6 < k[0.8] < k[0.95], k


def test_sequence_offsets_lengthen_blocks_and_many_sequences_are_resampled_whole():
    rng = np.random.default_rng(6)
    rates, seq = drifting_spectra(rng, phi=0.0, n_seq=4)
    flat = bootstrap_ir_from_hists(histogram_rows(rates), WINDOW, 50, seq=seq)
    rates, seq = drifting_spectra(rng, phi=0.0, n_seq=4, offsets=[-0.15, -0.05, 0.05, 0.15])
    shifted = bootstrap_ir_from_hists(histogram_rows(rates), WINDOW, 50, seq=seq)
    assert shifted.block_length > 4 * max(flat.block_length, 1), (flat.block_length, shifted.block_length)
    many = resampling_for(np.ones(40 * 8), np.repeat(np.arange(40), 8))
    assert many.kind == "sequences" and many.unit == "sequences" and many.n_units == 40
    few = resampling_for(np.ones(19 * 8), np.repeat(np.arange(19), 8))
    assert few.kind == "blocks"


def test_replicates_of_whole_sequences_sum_whole_sequences():
    seq = np.repeat(np.arange(25), 4)
    plan = resampling_for(np.zeros(100), seq)
    v = np.zeros((100, 1))
    v[seq == 3] = 1.0                                                      # only sequence 3 counts
    sums = plan.replicate_sums(v, 500, seed=0)[:, 0]
    assert set(np.unique(sums)) <= {0.0, 4.0, 8.0, 12.0, 16.0, 20.0}      # multiples of a sequence
    assert sums.mean() == pytest.approx(4.0, rel=0.15)                     # drawn 1 time in 25, 25 draws


@pytest.mark.parametrize("n_seq", [4, 30])
def test_the_closed_form_variance_of_a_replicate_sum_is_that_of_the_draws(n_seq):
    """Resampling.sum_variance (the memory fits' seed-free weights) against the variance of
    20000 drawn replicate sums, whole sequences (30) and circular blocks (4 sequences): within
    6 %, the Monte-Carlo error of a variance from 20000 draws being about 1 %."""
    rng = np.random.default_rng(3)
    seq = np.repeat(np.arange(n_seq), 50)
    v = rng.normal(size=(len(seq), 3)) + np.repeat(rng.normal(size=(n_seq, 3)), 50, 0)  # (N, 3)
    plan = resampling_for(v[:, 0], seq)
    assert plan.kind == ("sequences" if n_seq >= 20 else "blocks")
    drawn = plan.replicate_sums(v, 20000, seed=1).var(0) * plan.variance_factor
    np.testing.assert_allclose(plan.sum_variance(v), drawn, rtol=0.06)
