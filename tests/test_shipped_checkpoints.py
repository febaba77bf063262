"""The demo checkpoints in checkpoints/ load through tdos and are actually trained.

Random weights would pass every shape check, so the decisive test is the loss: on held-out
Python stdlib bytes (the training script's own split, read from this interpreter) each
model must stay at or near what the shipped weights reach, MAX_BITS, far below the unigram
baseline (the best a model without context can do, about 4.8 bits/byte on these windows).
Random or barely trained weights sit near or above unigram.
"""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sweep.worker.model import load_model

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = [  # (directory, arch, n_layers, d_model)
    ("tiny-mamba-bytes", "mamba", 4, 128),
    ("tiny-neox-bytes", "gpt_neox", 4, 128),
]
# bits/byte on the test's windows below: what the shipped weights score (mamba 1.48, neox
# 1.48) plus 0.3, so a retrain no worse passes and an undertrained one fails (the weights
# before the last retraining scored 1.81 and 2.01 here, the ones before them 2.55 for the NeoX)
MAX_BITS = {"tiny-mamba-bytes": 1.8, "tiny-neox-bytes": 1.8}
WINDOWS, WINDOW_LEN = 8, 128  # 1 KiB of held-out text: the whole test stays a few seconds


def _train_bytes_module():
    """training/train_bytes.py is a standalone script; import it for its corpus split."""
    spec = importlib.util.spec_from_file_location("train_bytes", ROOT / "training" / "train_bytes.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def heldout():
    return heldout_windows()


def heldout_windows():
    """(windows (WINDOWS, WINDOW_LEN) int64, unigram baseline in bits/byte on those bytes)."""
    tb = _train_bytes_module()
    train_files, val_files = tb.split_files(tb.stdlib_files(tb.stdlib_root()))
    train, val = tb.read_bytes(train_files), tb.read_bytes(val_files)
    starts = torch.linspace(0, val.numel() - WINDOW_LEN, WINDOWS).long().tolist()
    windows = torch.stack([val[s : s + WINDOW_LEN] for s in starts]).long()
    # scored on the same bytes the model predicts: positions 1.. of each window
    return windows, tb.unigram_nats(train, windows[:, 1:].reshape(-1)) / math.log(2)


@pytest.mark.parametrize("name, arch, n_layers, d_model", SHIPPED)
def test_loads_through_tdos(name, arch, n_layers, d_model):
    path = ROOT / "checkpoints" / name
    model = load_model(path, dtype="float32")
    assert (model.arch, model.n_layers, model.d_model, model.vocab_size) == (arch, n_layers, d_model, 256)
    assert (path / "model.safetensors").stat().st_size < 10 * 2**20
    h = model.hidden_states(torch.arange(32) + 40, n_layers)  # printable ASCII bytes
    assert h.shape == (32, d_model) and torch.isfinite(h).all()


@pytest.mark.parametrize("name, arch, n_layers, d_model", SHIPPED)
def test_beats_unigram_on_heldout_stdlib(name, arch, n_layers, d_model, heldout):
    from transformers import AutoModelForCausalLM

    windows, unigram_bits = heldout
    hf = AutoModelForCausalLM.from_pretrained(ROOT / "checkpoints" / name, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = hf(input_ids=windows[:, :-1]).logits  # (W, T-1, 256)
    nats = F.cross_entropy(logits.reshape(-1, 256), windows[:, 1:].reshape(-1))
    model_bits = float(nats) / math.log(2)
    assert model_bits < unigram_bits / 2, (name, model_bits, unigram_bits)   # independent of the weights
    assert model_bits < MAX_BITS[name], (
        f"{name}: {model_bits:.3f} bits/byte on held-out stdlib (unigram {unigram_bits:.3f}), "
        f"above its {MAX_BITS[name]}"
    )


@pytest.mark.parametrize("name", [s[0] for s in SHIPPED])
def test_tokenizer_is_bytes(name):
    """The shipped tokenizer is found by the sweep's text path and maps text to its UTF-8 bytes."""
    from sweep.checkpoints.hub import load_tokenizer

    tok = load_tokenizer(str(ROOT / "checkpoints" / name), None)
    text = "def f(x):\n    return x ** 2  # é ∂\t\x00\x7f"
    ids = tok(text)["input_ids"]
    assert ids == list(text.encode("utf-8"))
    assert tok.decode(ids) == text


def test_a_log_shift_against_scipy_and_transformers_init():
    """a_log_shift's reference is transformers' own init (an untrained model moved 0, KS 0),
    its KS distance is scipy's two-sample statistic, and `moved` counts what was moved."""
    from scipy.stats import ks_2samp
    from transformers import MambaConfig, MambaForCausalLM

    from analysis.spectrum.decay import a_log_shift, s4d_real_init

    torch.manual_seed(7)
    fresh = MambaForCausalLM(MambaConfig(vocab_size=256, hidden_size=16, state_size=6,
                                         num_hidden_layers=1)).backbone.layers[0].mixer.A_log
    untouched = a_log_shift(fresh.detach().numpy())
    assert untouched["moved"] == 0 and untouched["ks"] == 0 and untouched["max_abs_delta"] < 1e-6

    rng = np.random.default_rng(0)
    init = s4d_real_init(np.zeros((50, 6)))
    delta = np.where(rng.random(init.shape) < 0.3, 0.25, 0.02) * rng.choice([-1, 1], init.shape)
    shift = a_log_shift(init + delta)
    assert shift["moved"] == float((np.abs(delta) > 0.1).mean())
    assert shift["ks"] == pytest.approx(ks_2samp((init + delta).ravel(), init.ravel()).statistic, abs=1e-12)


def test_shipped_mamba_a_log_is_learned():
    """The issue's bar for the demo Mamba: A_log measurably moved from its initialisation, in
    every layer (more than half the entries by more than 10 % of their rate)."""
    from safetensors.torch import load_file

    from analysis.spectrum.decay import a_log_shift

    weights = load_file(ROOT / "checkpoints" / "tiny-mamba-bytes" / "model.safetensors")
    layers = sorted(k for k in weights if k.endswith("A_log"))
    assert len(layers) == 4
    for key in layers:
        shift = a_log_shift(weights[key].double().numpy())
        assert shift["moved"] > 0.5, (key, shift)
