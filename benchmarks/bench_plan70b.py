"""Planning a Llama-3-70B-shaped checkpoint: `tdos sweep --dry-run` twice, cold and warm.

Writes a checkpoint with Llama-3-70B's shapes (80 layers, d 8192, 64 heads, 8 key-value heads,
d_ff 28672, vocabulary 128256; bf16, one safetensors shard a layer plus one for the rest,
141 GB) as **sparse** files: each shard's header is written and the file is extended to its
full size with a seek, so the tensors are holes that read as zeros and take no disk. The plan
reads the headers like any checkpoint's, and hashing reads every byte of them (the kernel
hands out the zeros without touching the disk, so this measures the hashing, not a drive).

Then it times, as separate processes with a fresh hash cache (TDOS_CACHE in a new directory),

    tdos sweep CONFIG --dry-run --workers 1      # float64, layer 40, 1 x 8 tokens, token_block 1,
                                                 # cluster.memory_limit 20GiB (issue 57's case)

twice: the first run reads and hashes every file (as every run did before the hash cache),
the second finds each file's sha256 in the cache (sweep/checkpoints/hashes.py). Both print the same
memory per worker.

    .venv/bin/python benchmarks/bench_plan70b.py [--dir /tmp/llama3-70b-sparse] [--timeout 900]
        [--tokens 8] [--memory-limit 20GiB]

Writes benchmarks/results/bench_plan70b.md. Not part of `make test`.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHAPES = dict(vocab_size=128256, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
              num_attention_heads=64, num_key_value_heads=8, max_position_embeddings=8192,
              rope_theta=500000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
_BF16 = 2          # bytes per element


def write_sparse_shard(path: Path, shapes: dict[str, tuple[int, ...]]) -> int:
    """A bf16 safetensors file of `shapes` whose data are holes; returns its size in bytes."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name in sorted(shapes):
        n = _BF16
        for s in shapes[name]:
            n *= s
        header[name] = {"dtype": "BF16", "shape": list(shapes[name]), "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)                # safetensors pads its header to 8 bytes
    with open(path, "wb") as fh:
        fh.write(len(raw).to_bytes(8, "little") + raw)
        fh.truncate(8 + len(raw) + offset)       # the tensors: one hole
    return 8 + len(raw) + offset


def write_checkpoint(root: Path) -> int:
    """config.json, one sparse shard per layer and one for the rest, the index; total bytes."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    index = root / "model.safetensors.index.json"
    if index.exists():
        return sum(f.stat().st_size for f in root.glob("*.safetensors"))
    root.mkdir(parents=True, exist_ok=True)
    config = LlamaConfig(**SHAPES, dtype="bfloat16")
    config.save_pretrained(root)
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in
                  AutoModelForCausalLM.from_config(config).state_dict().items()}
    groups: dict[str, dict] = {}
    for name, shape in shapes.items():
        part = name.split(".")
        shard = f"layer-{int(part[2]):02d}" if part[:2] == ["model", "layers"] else "outer"
        groups.setdefault(shard, {})[name] = shape
    total, weight_map = 0, {}
    for shard, group in groups.items():
        total += write_sparse_shard(root / f"{shard}.safetensors", group)
        weight_map.update({n: f"{shard}.safetensors" for n in group})
    index.write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    return total


def dry_run(config: Path, cache: Path, timeout: int) -> tuple[float, int, list[str]]:
    """(seconds, exit code, the memory lines) of `tdos sweep CONFIG --dry-run --workers 1`."""
    env = {**os.environ, "TDOS_CACHE": str(cache), "PYTHONPATH": str(REPO)}
    t = time.perf_counter()
    p = subprocess.run(["timeout", str(timeout), sys.executable, "-m", "sweep", "sweep", str(config),
                        "--dry-run", "--workers", "1"], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    lines = [x.strip() for x in (p.stdout + p.stderr).splitlines()
             if "memory" in x or "Dask's limit" in x or x.strip().startswith("=") or "rror" in x]
    return seconds, p.returncode, lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/llama3-70b-sparse")
    ap.add_argument("--timeout", type=int, default=900, help="seconds allowed per dry run")
    ap.add_argument("--tokens", type=int, default=8, help="tokens of the one sequence")
    ap.add_argument("--memory-limit", default="20GiB", help="cluster.memory_limit per worker")
    args = ap.parse_args()
    root = Path(args.dir)
    total = write_checkpoint(root)
    used = sum(f.stat().st_blocks * 512 for f in root.iterdir())
    work = Path(tempfile.mkdtemp(prefix="bench-plan70b-"))
    config = work / "sweep.yaml"
    config.write_text(f"model:\n  path: {root}\n  dtype: float64\n"
                      f"inputs:\n  sequences: 1\n  length: {args.tokens}\n  seed: 0\n"
                      f"layers: [40]\nstore: {work / 'run.zarr'}\ncompute:\n  token_block: 1\n"
                      f"cluster:\n  memory_limit: {args.memory_limit}\n")
    load = os.getloadavg()
    runs = [dry_run(config, work / "cache", args.timeout) for _ in range(2)]
    lines = [f"# Planning a Llama-3-70B-shaped checkpoint (benchmarks/bench_plan70b.py)", "",
             f"{total / 1e9:.1f} GB in {len(list(root.glob('*.safetensors')))} sparse bf16 "
             f"safetensors files ({used / 1e6:.1f} MB on disk); `tdos sweep CONFIG --dry-run "
             f"--workers 1`, float64, layer 40, 1 x {args.tokens} tokens, "
             f"token_block 1, `cluster.memory_limit: {args.memory_limit}`; a fresh TDOS_CACHE; "
             f"{os.cpu_count()} CPUs shared, load average {load[0]:.1f} / {load[1]:.1f} / "
             f"{load[2]:.1f} before, {os.getloadavg()[0]:.1f} after", "",
             "| run | wall | exit | memory per worker |", "|---|---|---|---|"]
    for name, (seconds, code, memory) in zip(("first (every file read)", "second (hash cache)"), runs):
        peak = next((m for m in memory if m.startswith("peak memory")), " / ".join(memory))
        lines.append(f"| {name} | {seconds:.1f} s | {code} | {peak} |")
    lines += ["", "```", *runs[-1][2], "```"]
    out = REPO / "benchmarks" / "results" / "bench_plan70b.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
