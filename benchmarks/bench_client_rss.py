"""The client stays small whatever the checkpoint: peak RSS of `tdos sweep` itself.

    .venv/bin/python -u benchmarks/bench_client_rss.py [--work /tmp/tdos-rss]

Random-init checkpoints written with save_pretrained, each family at two sizes (about 0.5 and
1.4 GB of float32 weights: the layer count sets the size), then for each:
- `tdos sweep CONFIG --dry-run` (the plan alone: config.json, the safetensors headers, the
  meta-device model, the files hashed);
- `tdos sweep CONFIG --scheduler ADDRESS` against a `tdos cluster up` cluster started
  beforehand (one worker), so the measured process is the client only: 4 tokens of layer 0.
Peak RSS is the process's own (getrusage of the child), minus an idle interpreter's
(`python -c pass`). Writes benchmarks/results/bench_client_rss.{md,json}.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

OUT = Path(__file__).parent / "results"
PY = sys.executable


def configs() -> dict:
    """(family, size) -> a transformers config; d_model 1024 throughout."""
    import transformers as T

    def qwen3(n):
        return T.Qwen3Config(vocab_size=32000, hidden_size=1024, intermediate_size=3072,
                             num_hidden_layers=n, num_attention_heads=16, num_key_value_heads=8,
                             head_dim=128, tie_word_embeddings=True)

    def mixtral(n):
        return T.MixtralConfig(vocab_size=32000, hidden_size=1024, intermediate_size=1024,
                               num_hidden_layers=n, num_attention_heads=16, num_key_value_heads=8,
                               num_local_experts=8, num_experts_per_tok=2, tie_word_embeddings=True)

    def jamba(n):
        return T.JambaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2048,
                             num_hidden_layers=n, num_attention_heads=16, num_key_value_heads=8,
                             attn_layer_period=4, attn_layer_offset=2, expert_layer_period=2,
                             expert_layer_offset=1, num_experts=4, mamba_d_state=16,
                             mamba_expand=2, tie_word_embeddings=True)

    return {("qwen3", "0.5GB"): qwen3(6), ("qwen3", "1.4GB"): qwen3(20),
            ("mixtral-moe", "0.5GB"): mixtral(4), ("mixtral-moe", "1.4GB"): mixtral(12),
            ("jamba-hybrid", "0.5GB"): jamba(4), ("jamba-hybrid", "1.4GB"): jamba(14)}


def write_checkpoints(work: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    out = {}
    for (family, size), cfg in configs().items():
        d = work / f"{family}-{size}"
        if not (d / "config.json").is_file():
            torch.manual_seed(0)
            AutoModelForCausalLM.from_config(cfg).save_pretrained(d)
        out[family, size] = d
    return out


def run_one(path: Path, work: Path, scheduler: str) -> dict:
    doc = {"model": {"path": str(path)}, "inputs": {"sequences": 1, "length": 4},
           "layers": [0], "store": str(work / f"{path.name}.zarr"),
           "compute": {"token_block": 4, "live_every": 0}}
    cfg = work / f"{path.name}.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    tdos = [PY, "-m", "sweep", "sweep", str(cfg)]
    code_d, dry, _ = _isolated(tdos + ["--dry-run"])
    code_s, full, log = _isolated(tdos + ["--scheduler", scheduler])
    assert code_d == code_s == 0, log
    size = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    return {"checkpoint": path.name, "weight_bytes": size, "dry_run_mib": dry, "sweep_mib": full}


def _isolated(cmd):
    """Peak RSS of `cmd` alone: run through a fresh python that reports its child's rusage."""
    probe = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
             "print('RC', p.returncode, 'RSS', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([PY, "-c", probe, *cmd], capture_output=True, text=True)
    m = re.search(r"RC (-?\d+) RSS (\d+)", out.stdout)
    return int(m.group(1)), int(m.group(2)) / 1024, out.stdout + out.stderr


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--work", default="/tmp/tdos-rss")
    args = p.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    paths = write_checkpoints(work)
    _, idle, _ = _isolated([PY, "-c", "pass"])
    up = subprocess.Popen([PY, "-m", "sweep", "cluster", "up", "--workers", "1"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        address = None
        for line in up.stdout:
            m = re.search(r"(tcp://[\d.]+:\d+)", line)
            if m:
                address = m.group(1)
                break
        rows = [{**run_one(path, work, address), "family": f, "size": s}
                for (f, s), path in paths.items()]
    finally:
        up.terminate()
        up.wait(timeout=60)
    for r in rows:
        r["dry_run_above_idle_mib"] = r["dry_run_mib"] - idle
        r["sweep_above_idle_mib"] = r["sweep_mib"] - idle
        print(json.dumps(r), flush=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_client_rss.json").write_text(json.dumps({"idle_mib": idle, "rows": rows}, indent=1))
    lines = [f"# bench_client_rss (idle interpreter {idle:.0f} MiB)", "",
             "| checkpoint | weights | --dry-run, MiB above idle | sweep client, MiB above idle |",
             "|---|---|---|---|"]
    lines += [f"| {r['family']} | {r['weight_bytes'] / 1e9:.2f} GB | {r['dry_run_above_idle_mib']:.0f} | "
              f"{r['sweep_above_idle_mib']:.0f} |" for r in rows]
    (OUT / "bench_client_rss.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
