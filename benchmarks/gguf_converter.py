"""GGUF files made by another converter: llama.cpp's convert_hf_to_gguf.py, swept exactly.

tests/test_gguf.py writes its GGUF files with tests/gguf_files.py; this script takes files
that tdos did not write. llama.cpp's converter is vendored by the llama-cpp-python sdist:

    pip download --no-deps --no-binary :all: llama-cpp-python -d /tmp/lcp
    tar xzf /tmp/lcp/llama_cpp_python-*.tar.gz -C /tmp/lcp
    .venv/bin/python benchmarks/gguf_converter.py --llama-cpp /tmp/lcp/llama_cpp_python-*/vendor/llama.cpp

(the converter imports `sentencepiece` for a LLaMA, which tdos does not need: install it in
the venv first). It saves a tiny LLaMA (4 layers, d = 32, SmolLM2's 49,152-token tokenizer,
taken from `--tokenizer-gguf` when given, else none) and a tiny Mamba (4 layers, d = 32, no
tokenizer: the converter writes its built-in GPT-NeoX vocabulary) with save_pretrained,
converts each with `--outtype f32` and `q8_0`, and sweeps every GGUF at its deepest layer
(layer 3), float64, layer-local, beside its twin: the safetensors checkpoint of what
transformers' own whole-file GGUF loader reads from it. Prints, per file, whether the stored
eigenvalues and ‖J_tt‖_F² are equal to the bit, and their largest relative difference from
the original checkpoint's sweep (the F32 file holds the original weights, up to Mamba's A
stored as -exp(A_log) and the metadata's 32-bit floats; Q8_0 its rounding).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

LAYER, SEQS, L = 3, 2, 6


def checkpoints(work: Path, tokenizer_gguf: Path | None) -> dict[str, Path]:
    import transformers as T
    from conftest import _perturb
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gen = torch.Generator().manual_seed(1)
    tok = None
    if tokenizer_gguf is not None:
        tok = AutoTokenizer.from_pretrained(str(tokenizer_gguf.parent), gguf_file=tokenizer_gguf.name)
    torch.manual_seed(0)
    configs = {
        "llama": T.LlamaConfig(vocab_size=len(tok) if tok else 256, hidden_size=32, intermediate_size=64,
                               num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                               max_position_embeddings=64),
        "mamba": T.MambaConfig(vocab_size=50280, hidden_size=32, num_hidden_layers=4, state_size=8,
                               expand=2),   # the converter's GPT-NeoX vocabulary, padded to 8
    }
    out = {}
    for name, config in configs.items():
        model = AutoModelForCausalLM.from_config(config).eval()
        _perturb(model, gen)
        model.save_pretrained(work / name)
        if tok is not None and name == "llama":
            tok.save_pretrained(work / name)
        out[name] = work / name
    return out


def convert(converter: Path, ckpt: Path, outtype: str) -> Path:
    out = ckpt.parent / f"{ckpt.name}-{outtype}.gguf"
    subprocess.run([sys.executable, str(converter / "convert_hf_to_gguf.py"), str(ckpt),
                    "--outtype", outtype, "--outfile", str(out)], check=True,
                   capture_output=True, cwd=converter)
    return out


def main() -> None:
    import zarr
    from test_gguf import twin

    from sweep.config.load import config_from_dict
    from sweep.run import run_sweep

    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp's tree (convert_hf_to_gguf.py)")
    ap.add_argument("--tokenizer-gguf", default=None, help="a GGUF whose tokenizer the LLaMA takes")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gguf-converter-"))
    ckpts = checkpoints(work, Path(args.tokenizer_gguf) if args.tokenizer_gguf else None)
    models, pairs = [], []
    for name, ckpt in ckpts.items():
        models.append({"path": str(ckpt), "dtype": "float64", "name": f"{name}-original"})
        for outtype in ("f32", "q8_0"):
            gguf = convert(Path(args.llama_cpp), ckpt, outtype)
            tw = twin(gguf, work / f"{gguf.stem}-twin")
            models += [{"path": str(gguf), "dtype": "float64", "name": gguf.stem},
                       {"path": str(tw), "dtype": "float64", "name": f"{gguf.stem}-twin"}]
            pairs.append((name, gguf))
    cfg = config_from_dict({"models": models, "inputs": {"sequences": SEQS, "length": L, "seed": 3},
                            "layers": [LAYER], "store": str(work / "s.zarr"),
                            "compute": {"token_block": L, "live_every": 0}})
    result = run_sweep(cfg, client=None, progress=False)
    assert result.exit_code == 0, result.errors
    routes = sorted({r["route"] for r in result.results if "route" in r})
    paths = sorted({r["jacobian_path"] for r in result.results if "block" in r})

    def read(group, array):
        return zarr.open_group(cfg.store, path=group, mode="r")[array][...]

    lines = [f"llama.cpp's convert_hf_to_gguf.py ({args.llama_cpp}); float64, layer {LAYER} of 4, "
             f"{SEQS} sequences x {L} random tokens; routes {routes}, paths {paths}", "",
             "| GGUF | tensor types | eigenvalues, ‖J_tt‖_F², h_3 equal to its twin's | "
             "‖J_tt‖_F² against the original checkpoint's (max relative) |", "|---|---|---|---|"]
    from sweep.checkpoints.gguf_tensors import read_header

    for name, gguf in pairs:
        same = all(np.array_equal(read(gguf.stem, a), read(f"{gguf.stem}-twin", a))
                   for a in ("eigenvalues", "frobenius2", "residual"))
        fro, orig = read(gguf.stem, "frobenius2"), read(f"{name}-original", "frobenius2")
        types = sorted({t.qtype.name for t in read_header(gguf, "gguf").tensors.values()})
        lines.append(f"| {gguf.name} | {', '.join(types)} | {'yes' if same else '**no**'} | "
                     f"{float(np.max(np.abs(fro - orig) / orig)):.1e} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
