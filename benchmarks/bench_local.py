"""One layer resident at Llama-3-8B's shapes: memory, bytes read, time, and J_tt against autograd.

Writes a random checkpoint with Llama-3-8B's shapes (d 4096, 32 layers, d_ff 14336, 32 heads,
8 key-value heads, vocabulary 128256; bf16 safetensors, one shard a layer, written tensor by
tensor, 16 GB on disk, never whole in memory), then, in float32, in one process:

- streams the residual h_0 .. h_16 of one 8-token sequence, one layer resident at a time
  (sweep/generic/local.py: the skeleton on meta, each layer read from its shard);
- computes J_tt of layer 16 for the first `--tokens` tokens through the model's own decoding
  (sweep/generic/decode.py) with only layer 16 materialised;
- checks J_00 against autograd of layer 16's own call on h_16 at position 0 (outside the
  decoding), and the eigenvalues of both;
- records the process's peak RSS, the bytes read from the checkpoint, the time per token of
  J_tt and of eig alone at d = 4096.

    .venv/bin/python benchmarks/bench_local.py [--dir /tmp/llama3-8b-shaped] [--tokens 2]

Writes benchmarks/results/bench_local.md. The whole-model route on the same plan needs the
model in float32 (32 GB): `tdos sweep --dry-run` reports it (printed below).
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

SHAPES = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
              num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
              rope_theta=500000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
LAYER, L = 16, 8


def write_checkpoint(root: Path) -> None:
    """bf16 random weights (N(0, 0.02), norms 1), one shard per layer, and the index."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, LlamaConfig

    if (root / "model.safetensors.index.json").exists():
        return
    root.mkdir(parents=True, exist_ok=True)
    config = LlamaConfig(**SHAPES, dtype="bfloat16")
    config.save_pretrained(root)
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in AutoModelForCausalLM.from_config(config).state_dict().items()}
    groups: dict[str, dict] = {}
    for name, shape in shapes.items():
        part = name.split(".")
        shard = f"layer-{int(part[2]):02d}" if part[:2] == ["model", "layers"] else "outer"
        groups.setdefault(shard, {})[name] = shape
    gen = torch.Generator().manual_seed(0)
    weight_map = {}
    for shard, names in groups.items():
        tensors = {n: (torch.ones(s) if n.endswith("norm.weight") else
                       torch.randn(s, generator=gen) * 0.02).to(torch.bfloat16)
                   for n, s in names.items()}
        save_file(tensors, root / f"{shard}.safetensors", metadata={"format": "pt"})
        weight_map.update({n: f"{shard}.safetensors" for n in names})
        del tensors
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main() -> None:
    from oracle import matched_eigvals_error

    from sweep.generic.decode import LayerJacobians
    from sweep.generic.local import LocalModel
    from sweep.worker.model import _use_tdos_attention

    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/llama3-8b-shaped")
    ap.add_argument("--tokens", type=int, default=2)
    args = ap.parse_args()
    root = Path(args.dir)
    existed = (root / "model.safetensors.index.json").exists()
    t = time.perf_counter()
    write_checkpoint(root)
    written = "already on disk" if existed else f"written in {time.perf_counter() - t:.0f} s"

    torch.set_grad_enabled(False)

    lm = LocalModel(root, torch.float32)
    _use_tdos_attention(lm.model)
    ids = torch.randint(3, 128000, (L,), generator=torch.Generator().manual_seed(1))
    t = time.perf_counter()
    hs = lm.stream(ids, LAYER)
    stream_s = time.perf_counter() - t
    streamed = lm.ckpt.read_bytes
    lm.resident(LAYER)
    lm.sequence(ids, hs[LAYER])
    per_layer = lm.ckpt.read_bytes - streamed
    t = time.perf_counter()
    with lm.injected():
        block = LayerJacobians(lm.model, LAYER, fresh=lm.fresh, on_forward=lm.at).run(ids, 0, args.tokens)
    jac_s = (time.perf_counter() - t) / args.tokens

    # autograd of layer 16's own call at position 0 (no cache, nothing before it)
    layer = lm._real[LAYER]
    pos = torch.zeros(1, 1, dtype=torch.long)
    rope = lm.model.model.rotary_emb(hs[LAYER][None, :1], position_ids=pos)

    def call(h):
        return layer(h.view(1, 1, -1), attention_mask=None, position_embeddings=rope, position_ids=pos).view(-1)

    with torch.enable_grad():
        J = torch.autograd.functional.jacobian(call, hs[LAYER][0].clone(), vectorize=True)
    j_err = float((block.jac[0] - J).abs().max() / J.abs().max())
    t = time.perf_counter()
    ours = torch.linalg.eigvals(block.jac[0]).numpy()
    eig_s = time.perf_counter() - t
    want = torch.linalg.eigvals(J).numpy()
    ev_err = matched_eigvals_error(ours[None], want[None])

    layer_gib = sum(p.numel() * 4 for p in layer.parameters()) / 2**30
    lines = [
        "# One layer resident at Llama-3-8B's shapes (benchmarks/bench_local.py)",
        "",
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32; checkpoint bf16, "
        f"{sum(f.stat().st_size for f in root.glob('*.safetensors')) / 1e9:.1f} GB in "
        f"{len(list(root.glob('*.safetensors')))} shards ({written})",
        "",
        "| what | value |",
        "|---|---|",
        f"| peak RSS of the process (everything below) | {peak_gib():.2f} GiB |",
        f"| layer {LAYER} in float32 | {layer_gib:.2f} GiB |",
        f"| read from the checkpoint: the stream h_0..h_{LAYER} ({L} tokens) | {streamed / 1e9:.2f} GB in {stream_s:.1f} s |",
        f"| read for layer {LAYER} (the block's weights and {L} embedding rows) | {per_layer / 1e9:.3f} GB |",
        f"| J_tt of layer {LAYER}, per token (decode, d = 4096) | {jac_s:.1f} s |",
        f"| eig of one J_tt alone (d = 4096) | {eig_s:.1f} s |",
        f"| J_00 against autograd of the layer's own call (max relative) | {j_err:.1e} |",
        f"| its eigenvalues, matched (max relative) | {ev_err:.1e} |",
    ]
    out = REPO / "benchmarks" / "results" / "bench_local.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
