"""What making a null's weights costs a layer-local worker at d_model = 1024 (docs/nulls.md).

One decoder layer of a Qwen3-0.6B-shaped model (d 1024, MLP 3072, 16 heads of 128, 8 KV
heads) and of a Mamba-370M-shaped one (d 1024, state 16, expand 2) made resident by
`LocalModel.resident`: read from the checkpoint (the trained model), made by the model's own
init (random_init), or read and made by every other registered null kind. Two layers in a small-vocabulary
checkpoint written to a temp dir; the median of `--repeat` loads of layer 1, one thread.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_nulls.py [--repeat 5]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
import transformers as T

from sweep.checkpoints import kinds
from sweep.format.variants import Variant
from sweep.generic.local import LocalModel

SHAPES = {
    "qwen3 (d 1024)": lambda: T.Qwen3Config(vocab_size=512, hidden_size=1024, intermediate_size=3072,
                                            num_hidden_layers=2, num_attention_heads=16,
                                            num_key_value_heads=8, head_dim=128),
    "mamba (d 1024)": lambda: T.MambaConfig(vocab_size=512, hidden_size=1024, num_hidden_layers=2,
                                            state_size=16, expand=2),
}


def _time(path: Path, variant: Variant | None, repeat: int) -> float:
    lm = LocalModel(path, torch.float32, variant=variant, keep=1)
    times = []
    for _ in range(repeat):
        lm.resident(0)                         # layer 1 goes back to meta: read or made again
        t = time.perf_counter()
        lm.resident(1)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    null_kinds = kinds.names("null")
    print("| layer shape | params | read (trained) | " + " | ".join(null_kinds) + " |")
    print("|---|---|---|" + "---|" * len(null_kinds))
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in SHAPES.items():
            model = T.AutoModelForCausalLM.from_config(make())
            path = Path(tmp) / name.split()[0]
            model.save_pretrained(path)
            n = sum(p.numel() for p in model.model.layers[1].parameters()) if hasattr(model, "model") \
                else sum(p.numel() for p in model.backbone.layers[1].parameters())
            cells = [_time(path, v, args.repeat) for v in
                     (None, *(Variant(kind, 0, "model") for kind in null_kinds))]
            print(f"| {name} | {n / 1e6:.1f} M | " + " | ".join(f"{c * 1e3:.0f} ms" for c in cells) + " |")


if __name__ == "__main__":
    main()
