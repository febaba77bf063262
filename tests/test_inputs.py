"""Natural-text inputs: the built-in English text, files, directories and globs, a tokenizer
given apart from the checkpoint, and the record of what was read.

The oracle is the byte-level tokenizer shipped with checkpoints/tiny-*-bytes: its ids are the
UTF-8 bytes of the text, so the expected tokens are computed here without any tokenizer.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import yaml

from sweep.config.identity import fingerprint
from sweep.config.load import ConfigError
from sweep.plan.inputs import DEFAULT_TEXT
from sweep.plan.make import load_plan as load_config

ROOT = Path(__file__).resolve().parents[1]
BYTES_MAMBA = ROOT / "checkpoints" / "tiny-mamba-bytes"      # ships tokenizer.json (bytes)
BYTES_TOKENIZER = ROOT / "checkpoints" / "tiny-neox-bytes"   # another directory holding one


def _config(tmp_path, model: Path, **inputs) -> str:
    doc = {"model": {"path": str(model)}, "inputs": {"sequences": 2, "length": 16, **inputs},
           "layers": [0], "store": str(tmp_path / "run.zarr")}
    p = tmp_path / "cfg.yaml"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


@pytest.fixture(scope="module")
def bare_mamba(tmp_path_factory):
    """A 256-token Mamba saved with save_pretrained and no tokenizer files (like
    state-spaces/mamba-370m, which needs the GPT-NeoX tokenizer given apart)."""
    import torch
    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(0)
    d = tmp_path_factory.mktemp("bare") / "mamba"
    MambaForCausalLM(MambaConfig(vocab_size=256, hidden_size=16, num_hidden_layers=2, state_size=4,
                                 time_step_rank=2)).save_pretrained(d)
    assert not list(d.glob("tokenizer*"))
    return d


def _stdlib_text() -> str:
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


def test_default_text_needs_no_download(tmp_path):
    cfg = load_config(_config(tmp_path, BYTES_MAMBA, text=DEFAULT_TEXT))
    (m,) = cfg.models
    text = _stdlib_text()
    expected = np.frombuffer(text.encode("utf-8")[:32], dtype=np.uint8).astype(np.int64).reshape(2, 16)
    np.testing.assert_array_equal(m.tokens, expected)
    rec = m.inputs
    assert rec["text"] == DEFAULT_TEXT and cfg.config.inputs.text == DEFAULT_TEXT
    assert rec["text_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert rec["text_chars"] == len(text) > 100_000          # English prose, plenty for long sweeps
    assert rec["python"].count(".") == 2


def test_tokenizer_given_apart_from_the_checkpoint(tmp_path, bare_mamba):
    (tmp_path / "t.txt").write_text("natural text, " * 10)
    with pytest.raises(ConfigError, match=r"^inputs\.text: .* ships no tokenizer .* set inputs\.tokenizer"):
        load_config(_config(tmp_path, bare_mamba, text="t.txt"))
    cfg = load_config(_config(tmp_path, bare_mamba, text="t.txt", tokenizer=str(BYTES_TOKENIZER)))
    (m,) = cfg.models
    expected = np.frombuffer(b"natural text, natural text, natu", dtype=np.uint8).astype(np.int64)
    np.testing.assert_array_equal(m.tokens.ravel(), expected)
    assert cfg.config.inputs.tokenizer == str(BYTES_TOKENIZER)
    assert m.inputs["text_files"] == [str((tmp_path / "t.txt").resolve())]
    assert set(m.inputs["tokenizer_files"]) >= {"tokenizer.json"}        # its identity, hashed
    # the tokenizer is part of what the store holds: another one is another store
    own = load_config(_config(tmp_path, BYTES_MAMBA, text="t.txt"))
    given = load_config(_config(tmp_path, BYTES_MAMBA, text="t.txt", tokenizer=str(BYTES_TOKENIZER)))
    np.testing.assert_array_equal(own.models[0].tokens, given.models[0].tokens)
    assert fingerprint(own.config) != fingerprint(given.config)


def test_directory_and_glob_read_in_sorted_order(tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "b.txt").write_text("second file. " * 2)
    (corpus / "a.txt").write_text("first file. " * 2)
    (corpus / "sub" / "c.md").write_text("third file. " * 2)
    (corpus / ".hidden").write_bytes(b"\x00\xff never read")
    joined = "\n\n".join(["first file. " * 2, "second file. " * 2, "third file. " * 2])
    for spec, text in (("corpus", joined), ("corpus/*.txt", "\n\n".join(joined.split("\n\n")[:2]))):
        cfg = load_config(_config(tmp_path, BYTES_MAMBA, text=spec))
        (m,) = cfg.models
        want = np.frombuffer(text.encode()[:32], dtype=np.uint8).astype(np.int64).reshape(2, 16)
        np.testing.assert_array_equal(m.tokens, want)
        rec = m.inputs
        assert rec["text_sha256"] == hashlib.sha256(text.encode()).hexdigest()
        assert rec["text_file_count"] == len(rec["text_files"])
        assert [Path(f).name for f in rec["text_files"]] == (
            ["a.txt", "b.txt", "c.md"] if spec == "corpus" else ["a.txt", "b.txt"])


def test_random_ids_stay_available(tmp_path):
    cfg = load_config(_config(tmp_path, BYTES_MAMBA, seed=7))
    (m,) = cfg.models
    want = np.random.default_rng(7).integers(0, 256, size=(2, 16), dtype=np.int64)
    np.testing.assert_array_equal(m.tokens, want)
    assert "text_sha256" not in m.inputs and cfg.config.inputs.text is None


def _bad_inputs(tmp_path, bare_mamba):
    (tmp_path / "bin.txt").write_bytes(b"ok\x00\x01")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "empty.txt").write_text("  \n")
    (tmp_path / "short.txt").write_text("too short")
    (tmp_path / "emptydir").mkdir()
    return {
        "binary": (dict(text="bin.txt"), r"bin\.txt is binary \(NUL byte at offset 2\) — give plain-text"),
        "not_utf8": (dict(text="latin1.txt"), r"latin1\.txt is not UTF-8 text \(byte 0xe9 at offset 3\)"),
        "empty": (dict(text="empty.txt"), r"empty\.txt is empty"),
        "short": (dict(text="short.txt"), r"gives 9 tokens .* need sequences\*length = 32 — use a longer"),
        "glob": (dict(text="*.nothing"), r"glob \*\.nothing matches no files"),
        "empty_dir": (dict(text="emptydir"), r"directory emptydir holds no files"),
        "builtin": (dict(text="stdlib:nope"), r"'stdlib:nope' is not a built-in text — use stdlib:pydoc"),
        "seed": (dict(seed=-5), r"^inputs\.seed: must be in 0\.\.2\*\*63-1, got -5"),
        "tokenizer_alone": (dict(tokenizer=str(BYTES_TOKENIZER)), r"^inputs\.tokenizer: only used"),
        "no_tokenizer_dir": (dict(text=DEFAULT_TEXT, tokenizer=str(bare_mamba)),
                             r"^inputs\.tokenizer: .* holds no tokenizer"),
    }


@pytest.mark.parametrize("kind", ["binary", "not_utf8", "empty", "short", "glob", "empty_dir",
                                  "builtin", "seed", "tokenizer_alone", "no_tokenizer_dir"])
def test_bad_inputs_are_one_line(tmp_path, bare_mamba, kind):
    changes, pattern = _bad_inputs(tmp_path, bare_mamba)[kind]
    with pytest.raises(ConfigError, match=pattern) as e:
        load_config(_config(tmp_path, BYTES_MAMBA, **changes))
    assert "\n" not in str(e.value)


def test_token_ids_beyond_the_model_vocabulary(tmp_path, tiny_checkpoints):
    """A byte tokenizer (ids up to 255) for a 64-token model: refused, never an index error."""
    (tmp_path / "t.txt").write_text("é" * 40)
    with pytest.raises(ConfigError, match=r"^inputs\.tokenizer: .* gives token id 195, but .* embeds "
                                          r"ids 0\.\.63 — use the tokenizer the model was trained with"):
        load_config(_config(tmp_path, tiny_checkpoints["mamba"], text="t.txt", tokenizer=str(BYTES_TOKENIZER)))


def test_text_sweep_with_the_checkpoints_own_tokenizer(tmp_path, client):
    """Through real worker processes: the workers hold the checkpoint's tokenizer files to
    their recorded sha256 like its weights (the store keys on them), and an edited
    tokenizer.json is another input, refused on resume before any block runs."""
    import json
    import shutil

    import zarr

    from sweep.errors import CheckpointChanged
    from sweep.run import run_sweep

    ck = tmp_path / "ck"
    shutil.copytree(BYTES_MAMBA, ck)
    (tmp_path / "t.txt").write_text("natural text, " * 10)
    doc = yaml.safe_load(open(_config(tmp_path, ck, text="t.txt")))
    doc["compute"] = {"token_block": 8, "live_every": 0}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(doc))
    result = run_sweep(load_config(str(tmp_path / "cfg.yaml")).config, client=client, progress=False)
    assert (result.exit_code, result.done) == (0, 4)                  # 2 sequences x 2 blocks
    g = zarr.open_group(str(tmp_path / "run.zarr"), path="ck", mode="r")     # named after its directory
    assert {"tokenizer.json", "tokenizer_config.json"} <= set(g.attrs["checkpoint"]["files"])
    expected = np.frombuffer(b"natural text, natural text, natu", dtype=np.uint8).reshape(2, 16)
    np.testing.assert_array_equal(g["tokens"][...], expected)

    tok = json.loads((ck / "tokenizer.json").read_text())
    (ck / "tokenizer.json").write_text(json.dumps(tok, indent=1))       # same ids, other bytes
    with pytest.raises(CheckpointChanged, match=r"tokenizer\.json changed since the store was made"):
        run_sweep(load_config(str(tmp_path / "cfg.yaml")).config, client=client, progress=False)
