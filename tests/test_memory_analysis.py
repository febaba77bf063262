"""The token-memory fits (analysis/studies/memory.py) on stores written through the engine's own
writers (sweep.store.writer.add_memory, write_memory) with profiles of known law:
‖J_{t,t−k}‖_F² ∝ e^{−k/ξ} in one layer and ∝ k^{−α} in another, each token with its own
amplitude and multiplicative noise. The right law is preferred and ξ or α is recovered
within its CI; the Mamba intrinsic kernel K_A(k) is ⟨e^{−Δλ_A k}⟩ of the stored Δ and A_log."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import zarr

from analysis import fit_memory, memory_profile, open_store
from analysis.io import schema
from analysis.io.settings import Settings
from analysis.report.memory import figure, markdown
from analysis.studies.memory import compare_memory, memory_study
from sweep.store.writer import (BlockValues, add_memory, create_group, write_a_log, write_block,
                                write_memory)

SEQS, L, K, EVERY, XI, ALPHA = 24, 96, 24, 2, 6.0, 1.5
SETTINGS = Settings(n_boot=200)


def _store(path, name="syn", seed=0, xi=XI, alpha=ALPHA, profiles=None):
    """A Mamba-like group with memory profiles of known law: drawn here, or `profiles(layer,
    seq, ts, law)` -> (m, stderr)."""
    rng = np.random.default_rng(seed)
    root = zarr.open_group(str(path), mode="a")
    root.attrs.update({"tdos_format": schema.FORMAT, "creation_id": "0" * 32, "fingerprint": "s",
                       "config": {}, "software": {},
                       "models": list(root.attrs.get("models", [])) + [name]})
    d, d_inner, d_state = 4, 3, 2
    g = create_group(root, name, identity={"path": name, "revision": None, "arch": "mamba"},
                     checkpoint={"dir": None, "files": {}}, dtype="float64",
                     inputs={"sequences": SEQS, "length": L, "seed": 0, "text": None},
                     layer_lengths=[(0, L), (1, L)], token_block=L,
                     tokens=np.zeros((SEQS, L), np.int64), d_model=d,
                     layer_kinds=["mamba", "mamba"], a_log_shapes=[[d_inner, d_state]] * 2)
    a_log = np.log(np.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]))
    for layer in range(2):
        write_a_log(g, layer, a_log)
    add_memory(g, {"lags": K, "probes": 0, "every": EVERY, "estimator": "exact"}, str(path))
    ts = np.arange(0, L, EVERY)
    k = np.arange(K + 1)
    laws = {0: np.exp(-k / xi), 1: np.maximum(k, 1.0) ** -alpha}
    for layer, law in laws.items():
        law = law.copy()
        law[0] = 1.0
        for q in range(SEQS):
            write_block(g, layer, q, 0, 0, BlockValues(np.full((L, d), 0.5 + 0j),
                                                       delta=np.full((L, d_inner), 0.25)))
            if profiles is not None:
                write_memory(g, layer, q, ts, *profiles(layer, q, ts, law))
                continue
            amp = rng.lognormal(0, 0.5, (len(ts), 1))
            m = amp * law[None] * rng.lognormal(0, 0.15, (len(ts), K + 1))
            m[:, 0] = amp[:, 0]
            m[np.arange(K + 1)[None, :] > ts[:, None]] = np.nan                # t − k < 0
            write_memory(g, layer, q, ts, m, np.zeros_like(m))
    return open_store(path, name)


def test_an_exponential_and_a_power_law_are_told_apart_and_recovered(tmp_path):
    st = _store(tmp_path / "s.zarr")
    exp = fit_memory(memory_profile(st, 0, SETTINGS), settings=SETTINGS)
    assert exp.preferred == "exponential" and exp.share > 0.9
    assert exp.xi_lo <= XI <= exp.xi_hi and exp.xi_hi - exp.xi_lo < 1.0, (exp.xi, exp.xi_lo, exp.xi_hi)
    pw = fit_memory(memory_profile(st, 1, SETTINGS), settings=SETTINGS)
    assert pw.preferred == "power law" and pw.share > 0.9
    assert pw.alpha_lo <= ALPHA <= pw.alpha_hi and pw.alpha_hi - pw.alpha_lo < 0.2
    assert pw.unit == "sequences"                              # 24 sequences: whole ones drawn
    # a window of the user's: the fit uses only those lags
    part = fit_memory(memory_profile(st, 1, SETTINGS), window=(2, 10), settings=SETTINGS)
    assert part.window == (2, 10) and part.n_lags == 9


class _Decaying(torch.nn.Module):
    """A layer built to have a known memory: y_t = Σ_{k=0..K} a_k c_{t,k} Q_k x_{t−k} / √d with
    Q_k orthogonal, so ‖J_{t,t−k}‖_F² = a_k² c_{t,k}², c_{t,0} = 1 and c² a fixed per-token
    gain of mean 1 (lognormal): the profile's expectation is the law a_k²."""

    def __init__(self, law, seed, d=8):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        q, _ = torch.linalg.qr(torch.randn(K + 1, d, d, generator=g, dtype=torch.float64))
        sigma = 0.3
        c2 = torch.exp(sigma * torch.randn(L, K + 1, generator=g, dtype=torch.float64) - sigma ** 2 / 2)
        c2[:, 0] = 1.0
        self.register_buffer("q", q / d ** 0.5)
        self.register_buffer("gain", (torch.as_tensor(law) * c2).sqrt())              # (L, K+1)

    def forward(self, x):                                                            # (1, n, d)
        n = x.shape[1]
        y = torch.zeros_like(x)
        for k in range(K + 1):
            y[:, k:] = y[:, k:] + self.gain[k:n, k, None] * (x[:, : n - k] @ self.q[k].T)
        return y


def test_a_layer_built_with_a_known_decay_is_measured_and_fitted(tmp_path):
    """The sweep's own lag_profile (exact, autograd of the layer's whole-sequence call) on
    layers built to have ‖J_{t,t−k}‖_F² ∝ e^{−k/ξ} (layer 0) and ∝ k^{−α} (layer 1), written
    through the sweep's writer: the right law is preferred and ξ or α is inside its CI."""
    from sweep.generic.selfcheck import WholeSequenceCall
    from sweep.numerics.memory import lag_profile

    def profiles(layer, q, ts, law):
        module = _Decaying(law, seed=1000 * layer + q)
        x = torch.randn(1, L, 8, generator=torch.Generator().manual_seed(q), dtype=torch.float64)
        m, err = lag_profile(WholeSequenceCall(module, x, (), {}), ts, K, probes=0, rows=len(ts) * 8)
        return m.numpy(), err.numpy()

    st = _store(tmp_path / "layer.zarr", profiles=profiles)
    exp = fit_memory(memory_profile(st, 0, SETTINGS), settings=SETTINGS)
    assert exp.preferred == "exponential" and exp.xi_lo <= XI <= exp.xi_hi, (exp.xi, exp.xi_lo, exp.xi_hi)
    pw = fit_memory(memory_profile(st, 1, SETTINGS), settings=SETTINGS)
    assert pw.preferred == "power law" and pw.alpha_lo <= ALPHA <= pw.alpha_hi, (pw.alpha, pw.alpha_lo, pw.alpha_hi)
    assert exp.xi_hi - exp.xi_lo < 1.0 and pw.alpha_hi - pw.alpha_lo < 0.2


def test_the_profile_counts_only_tokens_that_reach_back_k(tmp_path):
    st = _store(tmp_path / "s.zarr")
    p = memory_profile(st, 0, SETTINGS)
    sampled = len(range(0, L, EVERY))
    assert p.value[0] == 1 and p.n_tokens[0] == SEQS * sampled
    assert p.n_tokens[K] == SEQS * sum(t >= K for t in range(0, L, EVERY))
    assert (p.lo <= p.value + 1e-12).all() and (p.value <= p.hi + 1e-12).all()


def test_the_intrinsic_kernel_is_the_mean_decay_of_the_stored_ssm_rates(tmp_path):
    st = _store(tmp_path / "s.zarr")
    p = memory_profile(st, 0, SETTINGS)
    lam = 0.25 * np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])           # Δ·exp(A_log), every token
    np.testing.assert_allclose(p.intrinsic, [np.exp(-lam * k).mean() for k in range(K + 1)])


def test_report_pieces_and_a_comparison_of_two_models(tmp_path):
    a = memory_study(_store(tmp_path / "s.zarr", "a", seed=0), SETTINGS)
    b = memory_study(_store(tmp_path / "s.zarr", "b", seed=1, alpha=2.5), SETTINGS)
    text = "\n".join(markdown(a))
    assert "exponential" in text and "power law" in text and "K_A" in text
    figure(a, "synthetic")
    deltas = {d.what: d for d in compare_memory({"a": a, "b": b}, {"a": 1, "b": 1}, 0.9)}
    assert deltas["alpha"].hi < 0 and deltas["alpha"].verdict == "differ"   # 1.5 − 2.5
    assert deltas["alpha"].lo <= -1.0 <= deltas["alpha"].hi


def test_other_memory_settings_on_the_same_group_are_refused(tmp_path):
    from sweep.errors import StoreMismatch

    st = _store(tmp_path / "s.zarr")
    with pytest.raises(StoreMismatch, match="memory.lags: 24 -> 8"):
        add_memory(st.group, {"lags": 8, "probes": 0, "every": EVERY, "estimator": "exact"},
                   str(tmp_path / "s.zarr"))
