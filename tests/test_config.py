"""Config loading: the valid forms resolve as documented; every bad input is refused before
any compute with its one-line message naming the field and the fix."""
from __future__ import annotations

import json
import math
import re

import pytest
import yaml

from sweep.cli import main
from sweep.config.identity import fingerprint
from sweep.config.load import ConfigError, load_config
from sweep.format.schema import FORMAT
from sweep.plan.make import load_plan


def _write(tmp_path, doc, name="cfg.yaml") -> str:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return str(p)


def _base(ck, tmp_path, **changes) -> dict:
    doc = {"model": {"path": str(ck["gpt2"]), "dtype": "float32"},
           "inputs": {"sequences": 2, "length": 8, "seed": 0},
           "layers": [0, 1], "store": str(tmp_path / "run.zarr"),
           "compute": {"token_block": 4}}
    for key, value in changes.items():
        node = doc
        *parents, last = key.split(".")
        for p in parents:
            node = node[p]
        node[last] = value
    return doc


def test_minimal_config_resolves(tiny_checkpoints, tmp_path):
    doc = _base(tiny_checkpoints, tmp_path)
    del doc["compute"]
    plan = load_plan(_write(tmp_path, doc))
    cfg = plan.config
    (m,) = plan.models
    assert (m.name, m.info.arch, m.info.n_layers, m.info.max_length) == ("gpt2", "gpt2", 2, 32)
    assert m.rows == ((0, 8), (1, 8))
    assert [k.kind for k in m.info.kinds] == ["attention", "attention"]
    assert cfg.token_block == 32 and cfg.cluster.kind == "local"
    assert cfg.store == str((tmp_path / "run.zarr").resolve())


def test_layer_forms_and_overrides(tiny_checkpoints, tmp_path):
    doc = _base(tiny_checkpoints, tmp_path, layers="all")
    doc["models"] = [doc.pop("model"), {"path": str(tiny_checkpoints["mamba_ssm"]),
                                         "layers": {2: 4, 0: 8}, "dtype": "float64"}]
    plan = load_plan(_write(tmp_path, doc), {"store": str(tmp_path / "other.zarr")})
    gpt2, mamba = plan.models
    assert gpt2.rows == ((0, 8), (1, 8))
    assert mamba.rows == ((0, 8), (2, 4))
    assert (mamba.name, mamba.info.arch, mamba.info.vocab_size) == ("mamba_ssm-float64", "mamba", 61)
    assert [k.kind for k in mamba.info.kinds] == ["mamba"] * 3
    assert plan.store.endswith("other.zarr")


def test_fingerprint_covers_identity_only(tiny_checkpoints, tmp_path):
    base = load_config(_write(tmp_path, _base(tiny_checkpoints, tmp_path)))
    same = load_config(_write(tmp_path, _base(tiny_checkpoints, tmp_path, store=str(tmp_path / "b.zarr"),
                                              cluster={"workers": 3}), "b.yaml"))
    other = load_config(_write(tmp_path, _base(tiny_checkpoints, tmp_path, **{"inputs.seed": 1}), "c.yaml"))
    assert re.fullmatch(r"[0-9a-f]{64}", fingerprint(base))
    generic = load_config(_write(tmp_path, _base(tiny_checkpoints, tmp_path, **{"compute.engine": "generic"}),
                                 "d.yaml"))
    assert fingerprint(base) == fingerprint(same)
    assert fingerprint(base) != fingerprint(other)
    assert fingerprint(base) != fingerprint(generic)     # one store never mixes the two engines


def _checkpoint(tmp_path, name, config: dict):
    """A checkpoint directory of `config` whose weights do not matter: each refusal below
    comes from config.json, before any weight file is read."""
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    (d / "model.safetensors").write_bytes(b"")
    return str(d)


def _refused_checkpoints(tmp_path) -> dict:
    import transformers as T

    small = dict(vocab_size=64, num_hidden_layers=2)
    return {
        "bert": _checkpoint(tmp_path, "bert", T.BertConfig(hidden_size=32, num_attention_heads=4,
                                                          intermediate_size=64, **small).to_dict()),
        "t5": _checkpoint(tmp_path, "t5", T.T5Config(vocab_size=64, d_model=32, num_layers=2,
                                                    num_heads=4, d_ff=64, d_kv=8).to_dict()),
        "llava": _checkpoint(tmp_path, "llava", T.LlavaConfig().to_dict()),
        "remote": _checkpoint(tmp_path, "remote", {
            "model_type": "my_lm", "num_hidden_layers": 2,
            "auto_map": {"AutoModelForCausalLM": "modeling_my_lm.MyLMForCausalLM"}}),
    }


def _not_a_dir(tmp_path):
    f = tmp_path / "plain-file"
    f.write_text("x")
    return str(f / "run.zarr")


# (config changes, expected message); {ck[...]}/{tmp} are filled in per test
BAD = {
    "unknown_field": ({"inptus": {}},
                      "inptus: unknown field — did you mean 'inputs'? "
                      "(known: model, models, inputs, layers, store, compute, cluster, analysis, depth, memory, "
                      "study)"),
    "unknown_nested": ({"compute.tokenblock": 4},
                       "compute.tokenblock: unknown field — did you mean 'token_block'? "
                       "(known: token_block, device, live_every, cpu_linalg, engine, resident_layers, "
                       "stall_after)"),
    "stall_after_zero": ({"compute.stall_after": 0},
                         "compute.stall_after: must be a finite number of seconds > 0, got 0.0 — use "
                         "e.g. 30 (the default)"),
    "stall_after_text": ({"compute.stall_after": "soon"},
                         "compute.stall_after: expected a number, got 'soon' (str) — fix the value "
                         "(docs/config.md lists every field)"),
    "wrong_type": ({"inputs.sequences": "two"},
                   "inputs.sequences: expected an integer, got 'two' (str) — fix the value "
                   "(docs/config.md lists every field)"),
    "missing_field": ({"inputs": {"sequences": 2}},
                      "inputs.length: required field missing — add `length: ...`"),
    "bad_dtype": ({"model.dtype": "float16"},
                  "model.dtype: 'float16' is not supported — use float32 or float64"),
    "layer_out_of_range": ({"layers": [0, 99]},
                           "layers[1]: layer 99 out of range for {gpt2} (0..1) — use a value < 2"),
    "length_beyond_context": ({"inputs.length": 64},
                              "inputs.length: 64 exceeds the context of {gpt2} (max_length 32) — "
                              "use length <= 32"),
    "missing_checkpoint": ({"model.path": "/nonexistent/ckpt"},
                           "model.path: no checkpoint at /nonexistent/ckpt (not a local directory, "
                           "not in the Hugging Face cache) — download it first or fix the path"),
    "encoder_only": ({"model.path": "{bert}"},
                     "model.path: bert attends in both directions (BertSelfAttention has is_causal "
                     "False) — J_ts for s > t need not be zero, so its block Jacobian has no "
                     "per-token spectrum; use a decoder-only model"),
    "encoder_decoder": ({"model.path": "{t5}"},
                        "model.path: t5 is an encoder–decoder model — tdos sweeps decoder-only causal "
                        "LMs (its decoder sees the encoder's whole input)"),
    "multimodal": ({"model.path": "{llava}"},
                   "model.path: llava is a multimodal wrapper around a text decoder — save its text "
                   "model alone (its text_config, e.g. gemma3 -> gemma3_text) as a checkpoint and "
                   "sweep that"),
    "remote_code": ({"model.path": "{remote}"},
                    "model.path: model_type 'my_lm' is not in transformers {version} (its code ships "
                    "with the checkpoint (auto_map)) — set model.trust_remote_code: true to run the "
                    "checkpoint's own code, or upgrade transformers"),
    "engine": ({"compute.engine": "fast"},
               "compute.engine: 'fast' is not one of auto, generic — leave it out for auto"),
    "unwritable_store": ({"store": "{nodir}"},
                         "store: {nodir} is not writable ({tmp}/plain-file is not a writable "
                         "directory) — choose a path in a writable directory"),
    "token_block_zero": ({"compute.token_block": 0},
                         "compute.token_block: must be >= 1, got 0 — use e.g. token_block: 32"),
    "cpu_linalg": ({"compute.cpu_linalg": "mkl"},
                   "compute.cpu_linalg: 'mkl' is not one of auto, torch, openblas — leave it out for auto"),
    "sequences_zero": ({"inputs.sequences": 0},
                       "inputs.sequences: must be >= 1, got 0 — use a positive number of sequences"),
    "text_missing": ({"inputs.text": "no-such.txt"},
                     "inputs.text: file not found: no-such.txt — give an existing text file, "
                     "directory or glob, or stdlib:pydoc_data.topics, or remove `text` for random tokens"),
    "no_tokenizer": ({"inputs.text": "words.txt"},
                     "inputs.text: {gpt2} ships no tokenizer to read the text with — set "
                     "inputs.tokenizer (a hub id or directory), or remove `text` for random tokens"),
    "per_layer_tokens": ({"layers": {0: 8, 1: 9}},
                         "layers.1: 9 tokens for layer 1 must be in 1..inputs.length (8) — "
                         "lower it or raise inputs.length"),
    "cluster_section": ({"cluster": {"kind": "locl"}},
                        "cluster.kind: 'locl' is not one of local, cuda, scheduler, slurm, auto; "
                        "did you mean 'local'?"),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_input_is_one_line_error(tiny_checkpoints, tmp_path, kind):
    changes, expected = BAD[kind]
    import transformers

    names = {"gpt2": str(tiny_checkpoints["gpt2"]), **_refused_checkpoints(tmp_path),
             "nodir": _not_a_dir(tmp_path), "tmp": str(tmp_path.resolve()),
             "version": transformers.__version__}
    (tmp_path / "words.txt").write_text("some words " * 50)
    fill = lambda v: v.format(**names) if isinstance(v, str) else v  # noqa: E731
    doc = _base(tiny_checkpoints, tmp_path, **{k: fill(v) for k, v in changes.items()})
    with pytest.raises(ConfigError) as err:
        load_plan(_write(tmp_path, doc))
    assert str(err.value) == fill(expected)
    assert "\n" not in str(err.value)


def test_malformed_yaml_names_the_line(tmp_path):
    path = _write(tmp_path, "model:\n  path: x\ninputs: [1, 2\nlayers: all\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (f"{path}:4: malformed YAML: expected ',' or ']', but got ':' — "
                              f"fix the syntax at line 4 column 7")


def test_cli_prints_one_line_and_exits_2(tiny_checkpoints, tmp_path, capsys):
    doc = _base(tiny_checkpoints, tmp_path, layers=[5])
    code = main(["sweep", _write(tmp_path, doc)])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (f"tdos: error: layers[0]: layer 5 out of range for {tiny_checkpoints['gpt2']} "
                   f"(0..1) — use a value < 2\n")
    assert not (tmp_path / "run.zarr").exists()      # refused before anything was written


# ---------------------------------------------------------------- the budget (--dry-run)

def test_dry_run_prints_the_plan_and_writes_nothing(tiny_checkpoints, tmp_path, capsys):
    doc = _base(tiny_checkpoints, tmp_path)           # gpt2 d = 32, layers 0 and 1, 2 x 8 tokens, blocks of 4
    code = main(["sweep", _write(tmp_path, doc), "--dry-run", "--workers", "2"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0 and not (tmp_path / "run.zarr").exists()
    assert out[1].split() == ["gpt2", "float32", "0", "8", "4"] and out[2].split() == ["gpt2", "float32", "1", "8", "4"]
    assert "blocks: 8" in out
    # eigenvalues (complex64) + 4 fp32 scale/shift values per token, 32 tokens, + int64 ids
    assert any(line.startswith(f"store on disk: <= {(32 * 32 * 8 + 32 * 16 + 16 * 8) / 1024:.3g} KiB")
               for line in out)
    assert out[-1].startswith("budget: 8 blocks over 2 layer rows; store <= ")


def test_dry_run_refuses_another_configs_store(tiny_checkpoints, tmp_path, capsys):
    import zarr

    root = zarr.open_group(str(tmp_path / "run.zarr"), mode="w", zarr_format=3)
    root.attrs.update({"tdos_format": FORMAT, "fingerprint": "0" * 64})
    code = main(["sweep", _write(tmp_path, _base(tiny_checkpoints, tmp_path)), "--dry-run"])
    assert code == 2
    assert capsys.readouterr().err.startswith(f"tdos: error: store: {(tmp_path / 'run.zarr').resolve()} "
                                              f"was made from a different config (")


def test_core_hours_match_the_recorded_paper_sweep(tiny_checkpoints, tmp_path):
    """configs/mamba370m-paper.yaml as it was benchmarked (random ids, 1 sequence, layers
    0..47 at 128 tokens and 24 at 512, plus the fp64 rerun of layer 24 at 128) on Mamba-370M
    shapes: benchmarks/README.md records 435 s on 2 workers = 870 core-seconds."""
    import dataclasses

    from sweep.budget import size_sweep
    from sweep.plan.architecture import ModelInfo
    from sweep.plan.layers import LayerKind
    from sweep.plan.make import Plan

    plan = load_plan(_write(tmp_path, _base(tiny_checkpoints, tmp_path)))
    cfg, m = plan.config, plan.models[0]
    m370 = ModelInfo("mamba", 48, 1024, None, 50277, (LayerKind("mamba", 2048, (2048, 16)),) * 48,
                     weight_bytes=1_493_000_000, block_params=7_300_000, n_params=372_000_000)
    rows32 = tuple((layer, 512 if layer == 24 else 128) for layer in (0, 8, 16, 24, 32, 40, 47))
    models = (dataclasses.replace(m, spec=dataclasses.replace(m.spec, name="mamba-370m"), info=m370,
                                  rows=rows32, engine="fast"),
              dataclasses.replace(m, spec=dataclasses.replace(m.spec, name="mamba-370m-float64",
                                                              dtype="float64"),
                                  info=m370, rows=((24, 128),), engine="fast"))
    paper = dataclasses.replace(cfg, compute=dataclasses.replace(cfg.compute, token_block=32),
                                inputs=dataclasses.replace(cfg.inputs, sequences=1, length=512))
    budget = size_sweep(Plan(paper, models), workers=2)
    assert budget.blocks == 44
    assert 0.5 < budget.core_seconds / 870 < 2


def test_cost_between_measured_widths_follows_their_power_law():
    """SmolLM2's d = 576 was measured beside the d = 1024 blocks: at a measured width the
    measurement, between two the power law through them, beyond the last d^3."""
    from sweep.budget import at_width

    points = {1024: 1.669, 576: 0.181}
    assert at_width(points, 576) == 0.181 and at_width(points, 1024) == 1.669
    k = math.log(1.669 / 0.181) / math.log(1024 / 576)
    assert at_width(points, 768) == pytest.approx(0.181 * (768 / 576) ** k)
    assert 0.181 < at_width(points, 768) < 1.669
    assert at_width(points, 2048) == pytest.approx(1.669 * 8)
    assert at_width(points, 288) == pytest.approx(0.181 / 8)
    assert at_width({1024: 1.0}, 512) == pytest.approx(1 / 8)


def test_depth_walks_are_counted_per_layer_and_per_stack(tiny_checkpoints, tmp_path):
    """A walk over a run of 4 layers with spans 2 and 4 makes, per walked token, 4 frame
    updates and 3 + 1 stacks: 8 steps of DEPTH_SECONDS_PER_STEP at d = 576, cubic in d."""
    import dataclasses

    from sweep.budget import DEPTH_D, DEPTH_SECONDS_PER_STEP, size_sweep
    from sweep.plan.make import Plan

    plan = load_plan(_write(tmp_path, _base(tiny_checkpoints, tmp_path)))
    cfg, m = plan.config, plan.models[0]
    run = tuple((layer, 8) for layer in range(4))
    bare = size_sweep(Plan(cfg, (dataclasses.replace(m, rows=run),)), workers=2)
    walked = size_sweep(Plan(cfg, (dataclasses.replace(m, rows=run, depth_spans=(2, 4)),)), workers=2)
    steps = cfg.inputs.sequences * 8 * (4 + 3 + 1)
    walks = "walks (depth)"      # the term by itself: a walk's tasks replace blocks' (fixed costs)
    assert bare.time.parts[walks] == 0
    assert walked.time.parts[walks] == pytest.approx(
        steps * DEPTH_SECONDS_PER_STEP * (m.info.d_model / DEPTH_D) ** 3)


def test_budget_mirrors_the_workers_constants():
    """The budget keeps a copy of a worker constant (importing its owner would load
    transformers into `--dry-run`); it must follow the workers' value."""
    from sweep import budget
    from sweep.generic import decode

    assert budget.JAC_CHUNK == decode.JAC_CHUNK


def test_dry_run_memory_of_llama3_8b_shapes_layer_local_and_whole(tiny_checkpoints, tmp_path):
    """Llama-3-8B's shapes (32 layers of 218.1M parameters, 8.03B in all), float32, layer 16,
    one 8-token sequence: one resident layer fits a worker in a few GiB, the whole model does
    not fit this kind of machine; float64 under a cluster.memory_limit below one layer is
    refused in one line naming the field."""
    import dataclasses

    from sweep.budget import GiB, size_sweep
    from sweep.plan.architecture import ModelInfo
    from sweep.plan.layers import LayerKind
    from sweep.plan.make import Plan

    plan = load_plan(_write(tmp_path, _base(tiny_checkpoints, tmp_path)))
    cfg, m = plan.config, plan.models[0]
    m8b = ModelInfo("llama", 32, 4096, 8192, 128256, (LayerKind("attention"),) * 32,
                    weight_bytes=16_060_000_000, block_params=218_112_000,
                    n_params=8_030_261_248, shared_params=4096)
    cfg = dataclasses.replace(cfg, compute=dataclasses.replace(cfg.compute, token_block=8),
                              inputs=dataclasses.replace(cfg.inputs, sequences=1, length=8))

    def budget(info, dtype="float32", limit=None):
        model = dataclasses.replace(m, info=info, rows=((16, 8),), engine="generic",
                                    spec=dataclasses.replace(m.spec, dtype=dtype))
        c = dataclasses.replace(cfg, cluster=dataclasses.replace(cfg.cluster, memory_limit=limit))
        return size_sweep(Plan(c, (model,)), workers=1)

    local = budget(m8b)
    layer = 218_112_000 * 4 / GiB
    assert layer < local.worker_bytes / GiB < layer + 4       # the process, J_tt, eig, backward
    assert f"1 layer(s) x {layer:.3g} GiB" in local.table()
    whole = budget(dataclasses.replace(m8b, not_local="transformers converts 64 tensor(s) on load"))
    assert whole.worker_bytes / GiB > 8_030_261_248 * 4 / GiB
    assert "whole model: transformers converts" in whole.table()
    refused = budget(m8b, "float64", "1GB").refusal()
    assert refused.startswith("cluster.memory_limit: 0.931 GiB per worker (memory_limit 1GB) is "
                              "below what one worker needs")
    assert "\n" not in refused and "raise memory_limit" in refused
    assert budget(m8b, "float64", "10GB").refusal() is None      # 80 % of it holds the need
