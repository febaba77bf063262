"""The referee config (configs/smollm2-referee.yaml, issue 56 item 11): the study a referee would
accept, declared, at the size only a bigger machine sweeps. It holds what it says (>= 32
documents of >= 128 tokens from two corpora Python ships, >= 16 nulls of every declared kind,
five layers), and it plans: its dry run gives the estimate for this machine and for one GPU
worker, and each declared test's detectable |Δ|, without computing anything."""
from __future__ import annotations

from pathlib import Path

import pytest

from sweep.cli import main
from sweep.config.load import load_config

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "smollm2-referee.yaml"
SMOLLM2 = ROOT / "checkpoints" / "smollm2"
CORPORA = ("pydoc-topics.jsonl", "stdlib-docstrings.jsonl")      # `make smollm2` writes both


def test_the_referee_config_declares_a_study_of_the_size_it_promises():
    cfg = load_config(CONFIG)
    m, study = cfg.models[0], cfg.study
    assert cfg.inputs.sequences >= 32 and cfg.inputs.length >= 128
    assert cfg.inputs.dataset.endswith("*.jsonl") and cfg.inputs.windows == "document"
    assert len(cfg.layers) == 5 and set(study.layers) == set(cfg.layers)
    assert all(getattr(m.nulls, kind) >= 16 for kind in study.against)
    assert {"beta", "density"} <= set(study.observables) and m.quantization.ensemble >= 8
    make = (ROOT / "Makefile").read_text()
    assert all(f"checkpoints/smollm2/{c}" in make for c in CORPORA)


@pytest.mark.skipif(not all((SMOLLM2 / f).exists() for f in ("SmolLM2-135M-Instruct.Q4_1.gguf", *CORPORA)),
                    reason="needs `make smollm2` (the GGUF and both corpora): CI's clean clone has neither")
def test_the_referee_config_plans_here_and_for_one_gpu_worker(tmp_path, capsys):
    store = tmp_path / "referee.zarr"
    assert main(["sweep", str(CONFIG), "--dry-run", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "core-hours on CPU" in out and "one GPU worker: ~" in out
    assert "design: 75 declared tests" in out and out.count("detectable |Δ| >=") >= 45
    assert not store.exists()                                   # a dry run computes nothing
    from sweep.plan.make import make_plan

    plan = make_plan(load_config(CONFIG, {"store": str(store)}))
    docs = plan.models[0].inputs["sequence_documents"]
    topics = sum(1 for _ in (SMOLLM2 / CORPORA[0]).open())
    assert min(docs) < topics <= max(docs)                      # documents of both corpora
