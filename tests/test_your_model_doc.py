"""docs/your-model.md runs as written, for each of the three kinds of checkpoint it names.

A tiny 4-layer model of each kind is written the way real ones are: a LLaMA saved with
save_pretrained (safetensors, a byte-level tokenizer saved beside it), a Mamba in mamba_ssm's
own layout as tests/conftest.py writes it (the tokenizer's files copied into the folder, the
page's way for a folder that ships none), and that LLaMA as a Q8_0 GGUF written by `gguf`'s
writer with its tokenizer in the metadata (tests/gguf_files.py). For each, in a fresh folder
laid out like the repository (configs/, a .venv link): configs/your-model.yaml is the page's
template with YOUR_MODEL replaced by the model's path, the only change, and every command of
the page's bash blocks and every python block runs as written through the real CLI (a real
LocalCluster, a real store). The table of mistakes is produced row by row and each one-line
error held to the page's; the minimums table to analysis.fit.enough.MINIMUMS; the GGUF and GPU
fragments to a dry run. The mamba_ssm tokenizer fragment names a hub tokenizer no test can have
offline: the folder carries its tokenizer's files instead, the page's other way.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
import yaml
from conftest import _perturb, _write_mamba_ssm
from gguf_files import write_gguf

from analysis.fit.enough import MINIMUMS

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "your-model.md"
TEMPLATE = ROOT / "configs" / "your-model.yaml"
PLACEHOLDER = "YOUR_MODEL"
BYTES = ROOT / "checkpoints" / "tiny-mamba-bytes"      # its byte-level tokenizer: ids 0..255
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
KINDS = ("safetensors", "mamba_ssm", "gguf")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)


# ---- the page ------------------------------------------------------------------------------
def blocks(lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall(PAGE.read_text()) if kind == lang]


def table(heading: str) -> list[list[str]]:
    """The body rows (their cells) of the first table under the page's `heading`."""
    lines = PAGE.read_text().split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return [[c.strip() for c in line.split("|")[1:-1]] for line in lines[start + 2:end]]


def code(cell: str) -> str:
    """The last inline code of a cell, `x` or ``x``."""
    m = re.findall(r"``(.+?)``|`(.+?)`", cell)[-1]
    return m[0] or m[1]


def commands() -> list[str]:
    """Every command of the page's bash blocks, in page order, each once."""
    out = []
    for body in blocks("bash"):
        out += [line for line in body.splitlines() if line.strip() and not line.startswith("#")]
    return list(dict.fromkeys(out))


# ---- tiny checkpoints ------------------------------------------------------------------------
def _llama():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=32, num_hidden_layers=4,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=64, max_position_embeddings=256)
    model = transformers.LlamaForCausalLM(cfg).eval()
    _perturb(model, torch.Generator().manual_seed(1))
    return model


def _mamba_ssm(out: Path) -> Path:
    torch.manual_seed(0)
    cfg = transformers.MambaConfig(vocab_size=256, hidden_size=16, num_hidden_layers=4,
                                   state_size=4, expand=2, conv_kernel=4, time_step_rank=4)
    model = transformers.MambaForCausalLM(cfg).eval()
    _perturb(model, torch.Generator().manual_seed(2))
    _write_mamba_ssm(model, out)
    raw = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**raw, "vocab_size": 256}))
    return out


def _byte_tokenizer() -> dict:
    """The byte-level vocabulary as GGUF tokenizer keys (llama.cpp's `gpt2` model)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    chars = bytes_to_unicode()
    return {"add_tokenizer_model": "gpt2", "add_tokenizer_pre": "default",
            "add_token_list": [chars[i] for i in range(256)], "add_token_types": [1] * 256,
            "add_token_scores": [0.0] * 256, "add_token_merges": []}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    """{kind: the path model.path names}."""
    root = tmp_path_factory.mktemp("your-models")
    llama = _llama()
    llama.save_pretrained(root / "llama")
    ssm = _mamba_ssm(root / "mamba")
    for d in (root / "llama", ssm):
        for name in TOKENIZER_FILES:
            shutil.copy(BYTES / name, d / name)
    (root / "gguf").mkdir()
    gguf = write_gguf(llama, root / "gguf" / "llama.Q8_0.gguf", "Q8_0", tokenizer=_byte_tokenizer())
    return {"safetensors": root / "llama", "mamba_ssm": ssm, "gguf": gguf}


# ---- a folder laid out like the repository --------------------------------------------------
def workdir(base: Path, model_path, edit=None) -> Path:
    """`base` with configs/your-model.yaml (the template, YOUR_MODEL -> `model_path`, then
    `edit(doc)` if given) and .venv, the venv these tests run in."""
    (base / "configs").mkdir(parents=True)
    text = TEMPLATE.read_text().replace(PLACEHOLDER, str(model_path))
    if edit is not None:
        doc = yaml.safe_load(text)
        edit(doc)
        text = yaml.safe_dump(doc, sort_keys=False)
    (base / "configs" / "your-model.yaml").write_text(text)
    (base / ".venv").symlink_to(Path(sys.prefix))
    return base


def run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True,
                          timeout=540)


def _said(p: subprocess.CompletedProcess) -> str:
    return f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"


@pytest.fixture(scope="module")
def page_run(models, tmp_path_factory):
    """kind -> (its folder, [(command, process)]): the page run once per kind, as written."""
    runs = {}

    def get(kind):
        if kind not in runs:
            base = workdir(tmp_path_factory.mktemp(f"page-{kind}"), models[kind])
            done = [(c, run(c, base)) for c in commands()]
            for body in blocks("python"):
                (base / "read.py").write_text(body)
                done.append((body, run(".venv/bin/python read.py", base)))
            runs[kind] = (base, done)
        return runs[kind]
    return get


# ---- the tests ----------------------------------------------------------------------------------
def test_the_template_on_the_page_is_the_shipped_config():
    assert blocks("yaml")[0] == TEMPLATE.read_text()
    assert TEMPLATE.read_text().count(PLACEHOLDER) == 1
    assert PAGE.read_text().count(PLACEHOLDER) > 1      # the page names it where a path goes


@pytest.mark.parametrize("kind", KINDS)
def test_every_command_runs_as_written(kind, page_run):
    base, done = page_run(kind)
    for command, p in done:
        assert p.returncode == 0, f"{kind}: {command}\n{_said(p)}"
    report = base / "out" / "your-model-report"
    assert (report / "report.md").read_text().startswith("# tdos analysis")
    fits = json.loads((report / "fits.json").read_text())
    assert "your-model" in fits["models"]
    said = "\n".join(p.stdout for _, p in done)
    assert "study: beta, density, tail_width against random_init, shuffled at layers 1, 3" in said
    assert re.search(r"^declared before the data \d+ tests$", said, re.M)   # the python block
    assert said.count("at 95 % family-wise") == 6             # a sentence per observable and layer
    export = base / "out" / "your-model-shuffled-0"
    assert (export / "config.json").is_file() and (export / "model.safetensors").is_file()


def test_a_gguf_null_exports_its_own_values(models, page_run):
    """The exported shuffled null of the GGUF holds, tensor by tensor, the trained model's
    dequantized values (transformers' own GGUF loader) in another order."""
    base, _ = page_run("gguf")
    gguf = models["gguf"]
    trained = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32).state_dict()
    null = transformers.AutoModelForCausalLM.from_pretrained(
        str(base / "out" / "your-model-shuffled-0"), dtype=torch.float32).state_dict()
    moved = 0
    for name in ("model.layers.3.self_attn.q_proj.weight", "model.layers.1.mlp.down_proj.weight",
                 "model.embed_tokens.weight", "model.layers.3.input_layernorm.weight"):
        a, b = trained[name].flatten(), null[name].flatten()
        assert torch.equal(a.sort().values, b.sort().values), name
        moved += int(not torch.equal(a, b))
    assert moved == 4


def test_a_gguf_export_is_priced_by_its_dequantized_weights(models):
    """export-null's memory check counts a GGUF's weights as dequantized, not the file's bytes
    (a quantized file is a fraction of them): transformers' own parameter count."""
    from sweep.export import weight_bytes

    gguf = models["gguf"]
    model = transformers.AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    record = {"dir": str(gguf), "files": {gguf.name: {"size": gguf.stat().st_size}}}
    assert weight_bytes(record, "float64") == 8 * sum(p.numel() for p in model.parameters())
    assert weight_bytes(record, "float64") > 4 * gguf.stat().st_size


def test_more_sequences_grow_the_store(page_run):
    """Section 3's remedy: a config with more sequences plans on the finished store."""
    base, _ = page_run("safetensors")
    grown = base / "configs" / "grown.yaml"
    doc = yaml.safe_load((base / "configs" / "your-model.yaml").read_text())
    doc["inputs"]["sequences"] = 6
    grown.write_text(yaml.safe_dump(doc))
    p = run(".venv/bin/tdos sweep configs/grown.yaml --dry-run", base)
    assert p.returncode == 0, _said(p)
    assert re.search(r"^store: .*grow", p.stdout, re.M | re.I), p.stdout


def _set(path: str, value):
    def edit(doc):
        *keys, last = path.split(".")
        for k in keys:
            doc = doc[k]
        doc[last] = value(doc.get(last)) if callable(value) else value
    return edit


# a phrase of each row's first cell -> (kind, what YOUR_MODEL stands for given the kind's model,
# how the mistake is made): ("config", the model.path written, an edit of the template) in a
# fresh folder; ("store", an edit) of the finished page folder's config; ("command",) the
# cell's own command, run in the finished page folder
MISTAKES = {
    "the weights file": ("safetensors", lambda m: m, ("config", lambda m: m / "model.safetensors", None)),
    "the folder a GGUF is in": ("gguf", lambda m: m, ("config", lambda m: m.parent, None)),
    "without a tokenizer": ("mamba_ssm", lambda m: m.parent / "bare", ("config", lambda m: m.parent / "bare", None)),
    "a layer the model does not have": ("safetensors", lambda m: m, ("config", lambda m: m, _set("layers", [1, 40]))),
    "`study.layers` not": ("safetensors", lambda m: m, ("config", lambda m: m, _set("layers", [1, 2]))),
    "a kind added to `study.against`": ("safetensors", lambda m: m, (
        "config", lambda m: m, _set("study.against", lambda k: [*k, "gaussian"]))),
    "one null of a kind": ("safetensors", lambda m: m, ("config", lambda m: m, _set("model.nulls.random_init", 1))),
    "`quantization:` on a checkpoint": ("safetensors", lambda m: m, (
        "config", lambda m: m, _set("model.quantization", {"ensemble": 8}))),
    "into a finished store": ("safetensors", lambda m: m, ("store", _set("inputs.length", 64))),
    "given to `tdos analyze`": ("safetensors", lambda m: m, ("command",)),
    "given to `tdos export-null`": ("safetensors", lambda m: m, ("command",)),
}


def _expected(message: str, model) -> re.Pattern:
    parts = [re.escape(p).replace(re.escape(PLACEHOLDER), re.escape(str(model)))
             for p in message.split("…")]
    return re.compile(".*?".join(parts))


def _bare_mamba_ssm(ssm: Path) -> None:
    """The mamba_ssm folder as `state-spaces/mamba-*` ship it: no tokenizer."""
    bare = ssm.parent / "bare"
    if not bare.exists():
        bare.mkdir()
        for name in ("config.json", "pytorch_model.bin"):
            shutil.copy(ssm / name, bare / name)


def _make(key: str, cell: str, model: Path, how: tuple, page_run, tmp_path):
    if how[0] == "command":
        return run(f".venv/bin/{code(cell)}", page_run("safetensors")[0])
    if how[0] == "store":
        base = page_run("safetensors")[0]
        doc = yaml.safe_load((base / "configs" / "your-model.yaml").read_text())
        how[1](doc)
        (base / "configs" / "changed.yaml").write_text(yaml.safe_dump(doc))
        return run(".venv/bin/tdos sweep configs/changed.yaml --dry-run", base)
    folder = workdir(tmp_path / re.sub(r"\W+", "-", key).strip("-"), how[1](model), how[2])
    return run(".venv/bin/tdos sweep configs/your-model.yaml --dry-run", folder)


def test_each_mistake_gets_the_line_on_the_page(models, page_run, tmp_path):
    rows = table("## 7. The usual mistakes")
    assert len(rows) == len(MISTAKES)
    _bare_mamba_ssm(models["mamba_ssm"])
    for cell, message in rows:
        key = [k for k in MISTAKES if k in cell]
        assert len(key) == 1, cell
        kind, stands_for, how = MISTAKES[key[0]]
        p = _make(key[0], cell, models[kind], how, page_run, tmp_path)
        assert p.returncode == 2, f"{cell}\n{_said(p)}"
        last = (p.stderr + p.stdout).strip().splitlines()[-1]
        assert _expected(code(message), stands_for(models[kind])).fullmatch(last), \
            f"{cell}\n  page: {code(message)}\n  tdos: {last}"


def test_the_minimums_on_the_page_are_the_code():
    rows = table("## 3. The least data for a usable result")
    named = {re.search(r"\(`(\w+)`\)", r[0])[1]: r[1] for r in rows}
    assert set(named) <= set(MINIMUMS) and {"beta", "paired", "rank_test", "jackknife"} <= set(named)
    for name, needs in named.items():
        m = MINIMUMS[name]
        assert needs == f"{m.needs:,} {m.counts}", (name, needs)


@pytest.mark.parametrize("fragment, kind, said", [
    ("quantization:", "gguf", "your-model.quantized.7"),
    ("kind: cuda", "safetensors", "core-hours on CPU"),
])
def test_the_fragments_plan(fragment, kind, said, models, tmp_path):
    """The page's GGUF and GPU additions, merged into the template, pass a dry run."""
    body = next(b for b in blocks("yaml") if fragment in b)

    def merge(doc, add=yaml.safe_load(body)):
        for key, value in add.items():
            doc[key] = {**doc[key], **value} if isinstance(value, dict) and key in doc else value
    p = run(".venv/bin/tdos sweep configs/your-model.yaml --dry-run",
            workdir(tmp_path / "w", models[kind], merge))
    assert p.returncode == 0, _said(p)
    assert said in p.stdout


def test_a_folder_of_ggufs_names_the_file_to_give(tmp_path):
    """The GGUF row's message, and its other branch: a folder of several GGUF files names them."""
    from sweep.checkpoints.directory import locate
    from sweep.errors import ConfigError

    for name in ("b.Q8_0.gguf", "a.Q4_1.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
    with pytest.raises(ConfigError, match=r"give one of its 2 files: a\.Q4_1\.gguf, b\.Q8_0\.gguf$"):
        locate(tmp_path, None, "model.path")
    (tmp_path / "b.Q8_0.gguf").unlink()
    with pytest.raises(ConfigError, match=rf"give the file, {re.escape(str(tmp_path / 'a.Q4_1.gguf'))}$"):
        locate(tmp_path, None, "model.path")
