"""The token-memory fits (analysis/studies/memory.py, analysis/fit/lag_laws.py) on stores
written through the engine's own writers (sweep.store.writer.add_memory, write_memory) with
profiles of known law: ‖J_{t,t−k}‖_F² ∝ e^{−k/ξ}, ∝ k^{−α}, a broken power law, and profiles no
law fits, each token with its own amplitude and multiplicative noise. The right law is
preferred by BIC with a goodness-of-fit p that accepts it and rejects the others, its
parameters recovered within their CIs; point estimates do not move with the seed; m(k)'s
intervals stay above 0; the window starts past the recorded convolution width; the Mamba
intrinsic kernel K_A²(k) is ⟨e^{−2Δλ_A k}⟩ of the stored Δ and A_log."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import zarr

from analysis import fit_memory, memory_profile, open_store
from analysis.fit.lag_laws import P_REJECT
from analysis.report.memory import figure, markdown
from analysis.studies.memory import NEITHER, compare_memory, memory_study
from sweep.format import schema
from sweep.format.settings import Settings
from sweep.store.writer import (BlockValues, add_memory, create_group, write_a_log, write_block,
                                write_memory)

SEQS, L, K, EVERY, XI, ALPHA = 24, 96, 24, 2, 6.0, 1.5
SETTINGS = Settings(n_boot=200)
LAGS = np.arange(K + 1)


def _store(path, name="syn", seed=0, xi=XI, alpha=ALPHA, profiles=None, laws=None, noise=0.15,
           conv_widths=None):
    """A Mamba-like group with memory profiles of known law (`laws`: {layer: m(k)}, default
    e^{−k/ξ} in layer 0 and k^{−α} in layer 1): drawn here with lognormal noise of log-sd
    `noise` per token and lag, or `profiles(layer, seq, ts, law)` -> (m, stderr)."""
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
    add_memory(g, {"lags": K, "probes": 0, "every": EVERY, "estimator": "exact"}, str(path),
               conv_widths)
    ts = np.arange(0, L, EVERY)
    laws = laws or {0: np.exp(-LAGS / xi), 1: np.maximum(LAGS, 1.0) ** -alpha}
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
            m = amp * law[None] * rng.lognormal(0, noise, (len(ts), K + 1))
            m[:, 0] = amp[:, 0]
            m[np.arange(K + 1)[None, :] > ts[:, None]] = np.nan                # t − k < 0
            write_memory(g, layer, q, ts, m, np.zeros_like(m))
    return open_store(path, name)


def _broken(k_b=6.0, a1=0.8, a2=2.5):
    """k^−α₁ up to k_b, k^−α₂ past it, continuous."""
    k = np.maximum(LAGS, 1.0)
    return np.where(k <= k_b, k ** -a1, k_b ** (a2 - a1) * k ** -a2)


def test_an_exponential_and_a_power_law_are_told_apart_and_recovered(tmp_path):
    st = _store(tmp_path / "s.zarr")
    exp = fit_memory(memory_profile(st, 0, SETTINGS), settings=SETTINGS)
    # a replicate carries the sample's noise twice over, so it picks the law less often
    assert exp.preferred == "exponential" and exp.verdict == "fits" and exp.share > 0.75
    assert exp.xi_lo <= XI <= exp.xi_hi and exp.xi_hi - exp.xi_lo < 1.0, (exp.xi, exp.xi_lo, exp.xi_hi)
    assert exp.p["exponential"] > P_REJECT and exp.p["power law"] < 1e-6
    assert exp.p["broken power law"] < 1e-6 and exp.laws["exponential"].dof == K - 2
    pw = fit_memory(memory_profile(st, 1, SETTINGS), settings=SETTINGS)
    assert pw.preferred == "power law" and pw.verdict == "fits" and pw.share > 0.75
    assert pw.alpha_lo <= ALPHA <= pw.alpha_hi and pw.alpha_hi - pw.alpha_lo < 0.2
    assert pw.p["power law"] > P_REJECT and pw.p["exponential"] < 1e-6
    assert pw.unit == "jackknife over 24 sequences, t(23)"
    # a window of the user's: the fit uses only those lags
    part = fit_memory(memory_profile(st, 1, SETTINGS), window=(2, 10), settings=SETTINGS)
    assert part.window == (2, 10) and part.n_lags == 9


def test_a_broken_power_law_is_recovered_with_its_break(tmp_path):
    st = _store(tmp_path / "b.zarr", laws={0: _broken()})
    f = fit_memory(memory_profile(st, 0, SETTINGS), settings=SETTINGS)
    b = f.laws["broken power law"]
    assert f.preferred == "broken power law" and f.verdict == "fits" and b.p > P_REJECT
    assert f.p["power law"] < P_REJECT and f.p["exponential"] < P_REJECT
    for name, truth in (("alpha_1", 0.8), ("alpha_2", 2.5), ("k_break", 6.0)):
        lo, hi = b.ci[name]
        assert lo <= truth <= hi, (name, b.params[name], lo, hi)
    assert abs(b.params["k_break"] - 6.0) < 1.0 and b.dof == K - 4


def test_neither_law_fits_an_oscillating_or_two_regime_profile(tmp_path):
    """A power law with a strong oscillation, and an exponential that turns into a plateau:
    every law is rejected and the verdict says so; a comparison then takes no difference."""
    k = np.maximum(LAGS, 1.0)
    laws = {0: k ** -1.5 * (1 + 0.6 * np.cos(2 * np.pi * LAGS / 5)),
            1: np.exp(-LAGS / 2.0) + 1e-3}
    st = _store(tmp_path / "n.zarr", laws=laws)
    study = memory_study(st, SETTINGS)
    for f in study.fits.values():
        assert f.verdict == NEITHER and max(f.p.values()) < P_REJECT, f.p
    assert "| neither law fits |" in "\n".join(markdown(study))
    # issue 57: the figure joins no parameter of a rejected law: each alone, hollow, with ×
    fig = figure(study, "rejected")
    for ax in fig.axes[2:4]:
        assert not [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 1
                    and ln.get_linestyle() not in ("None", "", " ")]
        points = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
        assert points and all(ln.get_markerfacecolor() == "none" for ln in points)
    ok = memory_study(_store(tmp_path / "n.zarr", "ok"), SETTINGS)
    d, = compare_memory({"ok": ok, "n": study}, {"ok": 1, "n": 0}, 0.9)
    assert d.what is None and np.isnan(d.delta)
    assert d.verdict.endswith(f"{NEITHER}: n")


def test_point_estimates_do_not_depend_on_the_seed(tmp_path):
    """The covariance from the data: two analysis seeds give the same parameters to the bit.
    The model's own seed: the same study twice gives the same intervals."""
    st = _store(tmp_path / "s.zarr")
    fits = [fit_memory(memory_profile(st, 1, s), settings=s)
            for s in (SETTINGS, dataclasses.replace(SETTINGS, seed=7), SETTINGS)]
    for law in fits[0].laws:
        assert fits[0].laws[law].params == fits[1].laws[law].params
        assert fits[0].laws[law].chi2 == fits[1].laws[law].chi2
        assert fits[0].laws[law].ci == fits[2].laws[law].ci
    # 24 sequences: the jackknife over them draws nothing, so its intervals are seed-free too
    assert fits[0].unit.startswith("jackknife over")
    assert fits[0].laws["power law"].ci == fits[1].laws["power law"].ci
    assert fits[0].preferred == fits[1].preferred


def test_memory_intervals_never_go_below_zero(tmp_path):
    """Noise of a factor e^±3 per token: an interval of m(k) on the linear scale reaches below
    0 at some lag; the log-scale one stays above 0 and holds the estimate."""
    st = _store(tmp_path / "s.zarr", noise=3.0)
    p = memory_profile(st, 1, SETTINGS)
    linear = [p.resampling.interval(p.value[k], p.reps[:, k], p.level)[0] for k in LAGS]
    assert min(linear) < 0                                  # the case this guards against
    assert (p.lo >= 0).all() and (p.lo <= p.value).all() and (p.value <= p.hi).all()


def test_the_window_starts_past_the_recorded_convolution(tmp_path):
    """The sweep records each layer's causal-convolution width (here 4 and 0); the default
    window starts at k = width, from 1 without one; analysis.memory_window overrides it.
    The width comes from the layer itself: Mamba's conv_kernel, none in LLaMA."""
    import transformers as T

    from sweep.plan.layers import layer_kinds

    st = _store(tmp_path / "s.zarr", conv_widths=[4, 0])
    f0 = fit_memory(memory_profile(st, 0, SETTINGS), settings=SETTINGS)
    f1 = fit_memory(memory_profile(st, 1, SETTINGS), settings=SETTINGS)
    assert f0.window == (4, K) and "4 taps" in f0.window_rule and f0.n_lags == K - 3
    assert f1.window == (1, K) and "no causal convolution" in f1.window_rule
    asked = dataclasses.replace(SETTINGS, memory_window=(2, 12))
    assert fit_memory(memory_profile(st, 0, asked), settings=asked).window == (2, 12)
    for cfg, width in ((T.MambaConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2,
                                      state_size=8, conv_kernel=3), 3),
                       (T.LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4), 0)):
        with torch.device("meta"):
            model = T.AutoModelForCausalLM.from_config(cfg)
        assert [k.conv_width for k in layer_kinds(model)] == [width, width]


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
    assert exp.verdict == "fits" and exp.p["power law"] < P_REJECT
    pw = fit_memory(memory_profile(st, 1, SETTINGS), settings=SETTINGS)
    assert pw.preferred == "power law" and pw.verdict == "fits"
    assert pw.alpha_lo <= ALPHA <= pw.alpha_hi, (pw.alpha, pw.alpha_lo, pw.alpha_hi)
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
    np.testing.assert_allclose(p.intrinsic, [np.exp(-2 * lam * k).mean() for k in range(K + 1)])


def test_report_pieces_and_a_comparison_of_two_models(tmp_path):
    """Δα only where both models prefer the power law; "laws differ" otherwise."""
    a = memory_study(_store(tmp_path / "s.zarr", "a", seed=0), SETTINGS)
    b = memory_study(_store(tmp_path / "s.zarr", "b", seed=1, alpha=2.5), SETTINGS)
    text = "\n".join(markdown(a))
    assert "K_A²" in text and "| 0 | mamba | 1..24 |" in text
    for layer in (0, 1):                                   # a p-value per law and per layer
        for law in ("exponential", "power law", "broken power law"):
            assert f"| {layer} | {law} | " in text
    figure(a, "synthetic")
    d, = compare_memory({"a": a, "b": b}, {"a": 1, "b": 1}, 0.9)
    assert d.what == "alpha" and d.hi < 0 and d.verdict == "CI excludes 0 (uncorrected)"   # 1.5 − 2.5
    assert d.lo <= -1.0 <= d.hi
    d, = compare_memory({"a": a, "b": b}, {"a": 0, "b": 1}, 0.9)     # exponential vs power law
    assert d.what is None and d.verdict == "laws differ"


def test_other_memory_settings_on_the_same_group_are_refused(tmp_path):
    from sweep.errors import StoreMismatch

    st = _store(tmp_path / "s.zarr")
    with pytest.raises(StoreMismatch, match="memory.lags: 24 -> 8"):
        add_memory(st.group, {"lags": 8, "probes": 0, "every": EVERY, "estimator": "exact"},
                   str(tmp_path / "s.zarr"))


def test_the_memory_law_of_a_model_is_read_against_its_nulls(tmp_path):
    """null_study reads the parameter of the law the trained profile prefers (α of the power
    law at layer 1) in the trained model and, by that same law, in every null; a null twice as
    steep is told apart."""
    from analysis.studies.nulls import null_study
    from sweep.format.settings import Primary
    from sweep.format.variants import Variant

    path = tmp_path / "s.zarr"
    _store(path, "syn", seed=0, alpha=ALPHA)
    for k in range(2):
        _store(path, f"syn.random_init.{k}", seed=10 + k, alpha=2 * ALPHA)
        zarr.open_group(str(path), mode="a")[f"syn.random_init.{k}"].attrs["variant"] = (
            Variant("random_init", k, "syn").attrs())
    st = open_store(path, "syn")
    study = null_study(st, 1, L, SETTINGS, Primary("cumulative", "all-stable", "test"))
    [c] = [c for c in study.comparisons if c.observable.startswith("memory")]
    assert c.observable == "memory alpha (power law, layer 1)"
    assert abs(c.trained.value - ALPHA) < 0.2
    assert all(abs(e.value - 2 * ALPHA) < 0.3 for e in c.nulls.values())
    assert c.lo < c.delta < c.hi < 0 and c.verdict.startswith("distinguishable")
