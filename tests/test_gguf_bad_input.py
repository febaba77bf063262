"""Bad GGUF input (sweep/checkpoints/gguf_file.py): `tdos sweep --dry-run` of a GGUF that is refused
ends with exit 2 and one `tdos: error:` line naming the file and the reason, before anything
runs, and no store is created. Each file is written here by the `gguf` package's writer
(tests/gguf_files.py) from a tiny LLaMA, then damaged in one way."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
from families import FAMILIES
from gguf_files import write_gguf
from test_bad_input import _assert_one_line_error, _base, _run


def _llama(**changes):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = FAMILIES["llama"]()
    model = AutoModelForCausalLM.from_config(config).eval()
    for k, v in changes.items():          # the metadata says this, the tensors do not
        setattr(model.config, k, v)
    return model


def _refused(path, tmp_path, *words, inputs=None) -> str:
    doc = _base(path, tmp_path / "run.zarr")
    doc["inputs"].update(inputs or {})
    code, _, err = _run(doc, tmp_path, "--dry-run")
    _assert_one_line_error(code, err)
    assert not (tmp_path / "run.zarr").exists()
    for w in (str(path), *words):
        assert w in err, err
    return err


def test_a_good_gguf_passes_the_dry_run(tmp_path):
    path = write_gguf(_llama(), tmp_path / "llama.gguf")
    code, out, err = _run(_base(path, tmp_path / "run.zarr"), tmp_path, "--dry-run")
    assert code == 0, err
    assert "layer-local" in out


def test_an_architecture_transformers_does_not_read_from_gguf(tmp_path):
    path = tmp_path / "bert.gguf"
    w = gguf.GGUFWriter(str(path), "bert")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((8, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    _refused(path, tmp_path, "cannot load it", "bert")


def test_metadata_and_tensors_that_do_not_match(tmp_path):
    path = write_gguf(_llama(intermediate_size=96), tmp_path / "llama.gguf")
    _refused(path, tmp_path, "size mismatch", "mlp")


@pytest.mark.parametrize("damage", ["truncated", "not a gguf", "corrupt header"])
def test_a_truncated_or_corrupt_file(tmp_path, damage):
    path = write_gguf(_llama(), tmp_path / "llama.gguf")
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) * 2 // 3])
    elif damage == "not a gguf":
        path.write_bytes(b"this is not a model\n" * 100)
    else:
        path.write_bytes(data[:24] + bytes([0xFF]) * 64 + data[88:])
    _refused(path, tmp_path, "corrupt")


def test_a_tensor_type_that_cannot_be_dequantized(tmp_path):
    path = write_gguf(_llama(), tmp_path / "llama.gguf", types={"blk.0.ffn_up.weight": "Q8_1"})
    _refused(path, tmp_path, "blk.0.ffn_up.weight", "Q8_1", "cannot dequantize")


def test_text_inputs_with_no_tokenizer_in_the_file(tmp_path):
    path = write_gguf(_llama(), tmp_path / "llama.gguf")
    _refused(path, tmp_path, "no tokenizer", inputs={"text": "stdlib:pydoc_data.topics"})
