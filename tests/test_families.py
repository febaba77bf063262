"""Every family of tests/families.py, through the generic path, against independent oracles.

Each tiny checkpoint is written with save_pretrained and loaded by sweep.worker.model.load_model
(the path a hub id takes). In float64:
- the whole-sequence Jacobian of the unmodified layer is block lower-triangular: every block
  above the diagonal is exactly zero (so the union of eig(J_tt) is its spectrum);
- J_tt of the generic path (the model's own decoding, a prefill of 4 tokens, then decode
  steps) equals that Jacobian's diagonal blocks, entries and eigenvalues matched token by
  token, within tests/families.py's tolerance (1e-8; 1e-6 on J_tt and 2e-5 on eigenvalues
  where transformers computes parts of the layer in float32 inside a float64 model, which the
  generic path inherits);
- Δ_t of Mamba-style layers equals what transformers hands its own scan kernel.
Then one `tdos sweep` of every family at once, on two real worker processes, stores those
eigenvalues, Δ_t, A_log (as the checkpoint's file holds it) and the layer kinds.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
import zarr
from families import DEEPEST, FAMILIES, KINDS, MIDDLE, NEWER, kinds, tolerance
from oracle import (layer_input, layer_output, matched_eigvals_error, oracle_model, scan_deltas,
                    sequence_jacobian)

L = 9


def _ids(vocab: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (L,), generator=torch.Generator().manual_seed(seed))


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def test_the_locked_transformers_has_every_family():
    """Only an older release than the lock's may leave families out (a misspelt name may not)."""
    from importlib.metadata import version

    from sweep.worker.versions import release

    locked = next(l.split("==")[1] for l in (Path(__file__).parents[1] / "requirements.lock")
                  .read_text().splitlines() if l.startswith("transformers=="))
    assert not NEWER or release(version("transformers")) < release(locked), NEWER


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_generic_path_equals_whole_sequence_autograd(family_checkpoints, family):
    from sweep.worker.model import load_model

    tol = tolerance(family)
    ours = load_model(family_checkpoints[family], dtype="float64")
    ref = oracle_model(family_checkpoints[family])
    ids = _ids(ours.vocab_size)
    assert [k.kind for k in ours.kinds] == kinds(family)
    for layer in (0, DEEPEST):              # the whole model: no stand-ins (test_local has them)
        h, J = sequence_jacobian(ref, layer, ids)                         # (L, d), (L, d, L, d)
        for s in range(L):
            assert (J[s, :, s + 1:] == 0).all(), f"J_ts for s > t at output row t = {s}"
        engine = ours.jacobians(layer)
        blocks = [engine.run(ids, 0, 4), engine.run(ids, 4, L)]           # a prefill, then decoding
        jac = torch.cat([b.jac for b in blocks])
        diag = torch.stack([J[t, :, t] for t in range(L)])
        assert _relative(torch.cat([b.inputs for b in blocks]), h) <= tol
        assert max(_relative(jac[t], diag[t]) for t in range(L)) <= tol
        assert matched_eigvals_error(torch.linalg.eigvals(jac).numpy(),
                                     torch.linalg.eigvals(diag).numpy()) <= tolerance(family, True)
        if ours.kinds[layer].ssm:
            delta = torch.cat([b.delta for b in blocks])                   # (L, channels)
            assert _relative(delta, scan_deltas(ref, layer, ids)) <= tol
        else:
            assert all(b.delta is None for b in blocks)


@pytest.mark.parametrize("family", sorted(f for f, kinds in KINDS.items() if any("mamba" in k for k in kinds)))
def test_plain_autograd_route_equals_whole_sequence_autograd(family_checkpoints, family):
    """structured=False: every op of the Mamba-style and recurrent layers under plain
    autograd through transformers' own code (the fallback for a call tdos does not
    recognise), on the prefix's private copy of the cache: the same J_tt, and the real
    cache untouched (the copy's output checks that every token)."""
    from sweep.generic.decode import LayerJacobians
    from sweep.worker.model import load_model

    ours = load_model(family_checkpoints[family], dtype="float64")
    ref = oracle_model(family_checkpoints[family])
    ids = _ids(ours.vocab_size, seed=1)
    for layer in (0, DEEPEST):
        _, J = sequence_jacobian(ref, layer, ids)
        engine = LayerJacobians(ours.hf, layer, fresh=ours.fresh, structured=False)
        jac = torch.cat([engine.run(ids, 0, 3).jac, engine.run(ids, 3, L).jac])
        assert max(_relative(jac[t], J[t, :, t]) for t in range(L)) <= tolerance(family)


def test_every_family_sweeps_through_the_cli_exact_at_depth(family_checkpoints, tmp_path, capsys):
    """One config, one model group per family, float64, the generic path, layer-local (the
    deepest layer behind 3 stand-ins, a middle one behind 2), one token block per layer: the
    stored h_l, the middle layer's output (the deepest one's stored input) and the eigenvalues
    equal the whole-sequence oracle's; Δ_t and A_log as transformers' scan and the file hold."""
    from safetensors.numpy import load_file

    from analysis import open_store
    from sweep.cli import main

    doc = {"models": [{"path": str(p), "name": f, "dtype": "float64"}
                      for f, p in sorted(family_checkpoints.items())],
           "inputs": {"sequences": 1, "length": L, "seed": 5}, "layers": [MIDDLE, DEEPEST],
           "store": str(tmp_path / "families.zarr"),
           "compute": {"token_block": L, "live_every": 0, "engine": "generic"},
           "cluster": {"workers": 2}}
    (tmp_path / "families.yaml").write_text(yaml.safe_dump(doc))
    assert main(["sweep", str(tmp_path / "families.yaml")]) == 0
    out = capsys.readouterr().out
    assert "sweep complete" in out and "J_tt: generic" in out
    assert "whole model" not in out, out              # no model left the layer-local route
    for family, path in sorted(family_checkpoints.items()):
        st = open_store(doc["store"], model=family)
        g = zarr.open_group(doc["store"], path=family, mode="r")
        ref = oracle_model(path)
        ids = torch.from_numpy(np.asarray(st.tokens(0)))
        assert st.layer_kinds == kinds(family)
        weights = load_file(str(path / "model.safetensors"))
        for row, layer in enumerate(st.layers):
            assert (st.jacobian_path(layer) == "generic").all()
            h = layer_input(ref, layer, ids)                                  # (L, d)
            assert _relative(torch.from_numpy(g["residual"][row, 0]), h) <= tolerance(family), (family, layer)
            _, J = sequence_jacobian(ref, layer, ids)
            want = torch.linalg.eigvals(torch.stack([J[t, :, t] for t in range(L)])).numpy()
            assert matched_eigvals_error(st.eigenvalues(layer, 0), want) <= tolerance(family, True), family
            if family in KINDS and "mamba" in st.layer_kind(layer):
                np.testing.assert_allclose(st.delta(layer, 0), scan_deltas(ref, layer, ids).numpy(),
                                           rtol=tolerance(family), atol=0)
                a_log = next(v for k, v in weights.items()
                             if f"layers.{layer}." in k and k.endswith("A_log"))
                np.testing.assert_array_equal(st.a_log(layer), a_log.astype(np.float64))
        # the middle layer's output, h_{l+1}: what the store holds as the deepest layer's input
        out_mid = layer_output(ref, MIDDLE, ids)
        assert _relative(torch.from_numpy(g["residual"][1, 0]), out_mid) <= tolerance(family), family


@pytest.mark.parametrize("arch", ["mamba", "gpt2", "gpt_neox", "llama"])
def test_hand_written_paths_equal_the_generic_path(tiny_checkpoints, arch):
    """The four fast paths kept by benchmarks/bench_engines.py (>= 1.3x end to end) stay
    checked against the generic one, float64: to 1e-12 for GPT-2 (both float64 throughout);
    1e-6 where the generic path inherits float32 from transformers: the decay and state of
    Mamba, the rotary tables of GPT-NeoX and LLaMA (cos/sin of position x inv_freq taken in
    float32 whatever the model's dtype; measured 2e-9 and 7e-8 over these 8 positions, the
    hand-written blocks compute them in the compute dtype)."""
    from sweep.worker.model import load_model

    m = load_model(tiny_checkpoints[arch], dtype="float64")
    ids = _ids(m.vocab_size, seed=3)[:8]
    tol = 1e-12 if arch == "gpt2" else 1e-6
    for layer in range(m.n_layers):
        fast = m.block(layer).jacobians(m.hidden_states(ids, layer), 0, 8)
        generic = m.jacobians(layer).run(ids, 0, 8)
        assert max(_relative(fast[t], generic.jac[t]) for t in range(8)) <= tol
        if arch == "mamba":
            h = m.hidden_states(ids, layer)
            assert _relative(m.block(layer).delta(h, 0, 8), generic.delta) <= tol
