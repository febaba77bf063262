"""Shared fixtures: tiny seeded random checkpoints, written the way real ones are.

`tiny_checkpoints` saves one small model per architecture with `save_pretrained` (HF
format, safetensors) plus a mamba_ssm-format twin of the Mamba one (config.json with
d_model/n_layer/ssm_cfg, pytorch_model.bin with `backbone.embedding.weight`), so tests
load through exactly the path users take. Weights are perturbed away from the stock
initialisation (unit norms, zero biases, A_log = log(1..N), D = 1) so that no term of
the block math is accidentally trivial.
"""
from __future__ import annotations

import contextlib
import json
import os

# One thread per test process, as in every Dask worker (the nanny sets these): `make test`
# runs two processes on two cores, and torch's two-thread pool on the tiny blocks here is
# slower alone and contends with the other process (a float64 resident-layer test: 21.6 s at
# two threads, 4.9 s at one). Set before torch and numpy start their pools; tdos processes
# the tests start inherit it.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

torch.set_num_threads(1)          # where a plugin imported torch before this file

VOCAB = 64
MAMBA_SSM_VOCAB = 61           # padded to 64 by pad_vocab_size_multiple = 8


def _configs():
    from transformers import GPT2Config, GPTNeoXConfig, LlamaConfig, MambaConfig

    return {
        "mamba": MambaConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=3, state_size=4,
                             expand=2, conv_kernel=4, time_step_rank=4),
        "gpt2": GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=32,
                          bos_token_id=0, eos_token_id=0),
        "gpt_neox": GPTNeoXConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=32, rotary_pct=0.5),
        "llama": LlamaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, intermediate_size=64, max_position_embeddings=32),
    }


_MODEL_CLASSES = {
    "mamba": "MambaForCausalLM", "gpt2": "GPT2LMHeadModel",
    "gpt_neox": "GPTNeoXForCausalLM", "llama": "LlamaForCausalLM",
}


@torch.no_grad()
def _perturb(model, gen: torch.Generator):
    """Move every parameter off its structured init (seeded), keeping the model stable."""
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
        if name.endswith("A_log"):
            p.copy_(torch.log(torch.rand(p.shape, generator=gen) * 15 + 0.5))   # A in [0.5, 15.5]
        elif name.endswith("dt_proj.bias"):
            p.copy_(torch.rand(p.shape, generator=gen) * 4 - 4.5)             # dt ~ 0.01 .. 0.4
        elif p.ndim == 1:
            p.add_(0.2 * noise)
        else:
            p.add_(0.05 * noise)


def _write_mamba_ssm(hf_model, out):
    """mamba_ssm layout of the HF Mamba model `hf_model` (same weights, original key names)."""
    c = hf_model.config
    out.mkdir()
    cfg = {
        "d_model": c.hidden_size, "n_layer": c.num_hidden_layers, "vocab_size": MAMBA_SSM_VOCAB,
        "ssm_cfg": {"d_state": c.state_size, "d_conv": c.conv_kernel, "expand": c.expand,
                    "dt_rank": c.time_step_rank},
        "rms_norm": True, "residual_in_fp32": True, "fused_add_norm": True,
        "pad_vocab_size_multiple": 8, "tie_embeddings": True,
    }
    (out / "config.json").write_text(json.dumps(cfg))
    sd = {k.replace("backbone.embeddings.", "backbone.embedding."): v.clone()
          for k, v in hf_model.state_dict().items()}
    torch.save(sd, out / "pytorch_model.bin")


@pytest.fixture(scope="session", autouse=True)
def _hash_cache(tmp_path_factory):
    """The checkpoints' sha256 cache (sweep/checkpoints/hashes.py) in a directory of this session, set
    as a user would (TDOS_CACHE), so tests neither read nor grow the user's ~/.cache/tdos."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TDOS_CACHE", str(tmp_path_factory.mktemp("tdos-cache")))
        yield


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory):
    """{arch: local checkpoint dir} for mamba, gpt2, gpt_neox, llama, plus "mamba_ssm"."""
    import transformers

    root = tmp_path_factory.mktemp("tiny_checkpoints")
    gen = torch.Generator().manual_seed(0)
    paths = {}
    for arch, cfg in _configs().items():
        torch.manual_seed(0)
        model = getattr(transformers, _MODEL_CLASSES[arch])(cfg).eval()
        _perturb(model, gen)
        model.save_pretrained(root / arch)
        paths[arch] = root / arch
        if arch == "mamba":
            _write_mamba_ssm(model, root / "mamba_ssm")
            paths["mamba_ssm"] = root / "mamba_ssm"
    return paths


@contextlib.contextmanager
def local_client(workers: int):
    """A Client of a real LocalCluster of `workers` one-thread processes on free ports."""
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, scheduler_port=0,
                      dashboard_address=":0") as cluster, Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def client():
    """A real two-process LocalCluster on free ports, shared by one test module."""
    with local_client(2) as c:
        yield c


@pytest.fixture(scope="session")
def family_checkpoints(tmp_path_factory):
    """{family: checkpoint dir} (tests/families.py's save_family)."""
    from families import FAMILIES, save_family

    root = tmp_path_factory.mktemp("families")
    gen = torch.Generator().manual_seed(0)
    return {name: save_family(name, root, gen) for name in FAMILIES}
