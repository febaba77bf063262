"""`inputs.dataset` read by `datasets`' own loaders from files the tests write (JSONL, parquet,
save_to_disk): document windows stay inside one document, BOS follows the rule, the record
names the documents, and the windows and fingerprint follow the data, bit for bit.

The truth comes from the corpora of tests/dataset_helpers.py: unique words, so each token id
names its document and position.
"""
from __future__ import annotations

import time

import dataset_helpers as dh
import numpy as np
import pytest

from sweep.config.sections import InputsConfig
from sweep.errors import ConfigError
from sweep.plan.documents import SHUFFLE_BUFFER
from sweep.plan.windows import resolve_dataset

LENGTHS = dh.lengths()
DOCS = dh.corpus(LENGTHS)
VOCAB = dh.FIRST_WORD + 24_500                   # words of the largest corpus below (1,500 x 16)
L = 16


@pytest.fixture(scope="module")
def toks(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    n = VOCAB - dh.FIRST_WORD
    return {"bos": dh.load(dh.write_tokenizer(root / "bos", n, adds_bos=True)),
            "plain": dh.load(dh.write_tokenizer(root / "plain", n, adds_bos=False))}


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The same 40 documents as JSONL, parquet, a save_to_disk Dataset and a DatasetDict."""
    d = tmp_path_factory.mktemp("data")
    return {"jsonl": str(dh.write_jsonl(d / "docs.jsonl", DOCS)),
            "parquet": str(dh.write_parquet(d / "docs.parquet", DOCS)),
            "disk": str(dh.write_disk(d / "disk", DOCS)),
            "disk_dict": str(dh.write_disk(d / "dict", {"train": DOCS, "test": DOCS[:3]}))}


def _inputs(dataset, **kw) -> InputsConfig:
    return InputsConfig(**{"sequences": 4, "length": L, "dataset": dataset, **kw})


def _assert_inside_documents(tokens, rec, lengths, bos: bool):
    """Each row is BOS (if any) + consecutive tokens of its recorded document from its offset."""
    body = L - bos
    for k, (doc, off) in enumerate(zip(rec["sequence_documents"], rec["sequence_offsets"])):
        assert lengths[doc] >= body and 0 <= off <= lengths[doc] - body
        want = dh.FIRST_WORD + dh.word_start(lengths, doc) + off + np.arange(body)
        np.testing.assert_array_equal(tokens[k, int(bos):], want)
        assert (tokens[k, 0] == dh.BOS) == bos
    assert len(set(rec["sequence_documents"])) == len(rec["sequence_documents"])


@pytest.mark.parametrize("kind", ["jsonl", "parquet", "disk", "disk_dict"])
def test_document_windows_never_cross_a_document_boundary(sources, toks, kind, tmp_path):
    for seed in range(3):
        tokens, rec = resolve_dataset(_inputs(sources[kind], seed=seed), toks["plain"], VOCAB, tmp_path)
        assert tokens.shape == (4, L) and tokens.dtype == np.int64
        _assert_inside_documents(tokens, rec, LENGTHS, bos=False)
        assert rec["sequence_offsets"] == [0] * 4                 # offset: start (default)
        assert (rec["windows"], rec["bos"], rec["position0_is_bos"]) == ("document", "auto", False)
        assert rec["split"] == "train" and rec["column"] == "text"
    assert rec["dataset_kind"] == ("files" if kind in ("jsonl", "parquet") else "disk")
    assert rec["dataset_rows"] == (None if rec["dataset_kind"] == "files" else len(DOCS))


def test_the_same_config_picks_the_same_windows_bit_for_bit(sources, toks, tmp_path):
    for kind in ("jsonl", "disk"):
        runs = [resolve_dataset(_inputs(sources[kind], seed=s, offset="random"), toks["bos"], VOCAB,
                                tmp_path) for s in (5, 5, 6)]
        (a, ra), (b, rb), (c, rc) = runs
        np.testing.assert_array_equal(a, b)
        assert ra == rb
        assert ra["sequence_documents"] != rc["sequence_documents"]      # the seed shuffles documents


def test_random_offsets_stay_inside_their_document(sources, toks, tmp_path):
    offsets = []
    for seed in range(4):
        tokens, rec = resolve_dataset(_inputs(sources["parquet"], seed=seed, offset="random"),
                                      toks["bos"], VOCAB, tmp_path)
        _assert_inside_documents(tokens, rec, LENGTHS, bos=True)
        offsets += rec["sequence_offsets"]
    assert max(offsets) > 0 and rec["offset"] == "random"


def test_min_chars_drops_short_documents(sources, toks, tmp_path):
    cut = sorted(len(d) for d in DOCS)[len(DOCS) // 2]
    for seed in range(4):
        _, rec = resolve_dataset(_inputs(sources["jsonl"], seed=seed, min_chars=cut), toks["plain"],
                                 VOCAB, tmp_path)
        assert all(len(DOCS[d]) >= cut for d in rec["sequence_documents"])
    assert rec["min_chars"] == cut


@pytest.mark.parametrize("tok, rule, bos", [("bos", "auto", True), ("plain", "auto", False),
                                            ("plain", "always", True), ("bos", "never", False)])
def test_bos_rule_sets_position_0_of_every_sequence(sources, toks, tmp_path, tok, rule, bos):
    tokens, rec = resolve_dataset(_inputs(sources["disk_dict"], bos=rule), toks[tok], VOCAB, tmp_path)
    _assert_inside_documents(tokens, rec, LENGTHS, bos=bos)
    assert (rec["bos"], rec["position0_is_bos"], rec["bos_token_id"]) == (rule, bos, dh.BOS if bos else None)


def test_always_needs_a_tokenizer_with_a_bos(sources, tmp_path):
    tok = dh.load(dh.write_tokenizer(tmp_path / "nobos", VOCAB, adds_bos=False, bos_token=False))
    with pytest.raises(ConfigError, match=r"^inputs\.bos: always, but .* has no BOS token — use bos: auto"):
        resolve_dataset(_inputs(sources["jsonl"], bos="always"), tok, VOCAB, tmp_path)


def test_packed_windows_join_documents_with_eos(sources, toks, tmp_path):
    tokens, rec = resolve_dataset(_inputs(sources["jsonl"], windows="packed", seed=2), toks["bos"],
                                  VOCAB, tmp_path)
    assert (tokens[:, 0] == dh.BOS).all() and rec["separator"] == [dh.EOS] and rec["offset"] is None
    body = tokens[:, 1:].ravel()                                # the packed stream, BOS removed
    for k, (doc, off) in enumerate(zip(rec["sequence_documents"], rec["sequence_offsets"])):
        first = tokens[k, 1]
        if off < LENGTHS[doc]:
            assert first == dh.FIRST_WORD + dh.word_start(LENGTHS, doc) + off
        else:
            assert first == dh.EOS and off == LENGTHS[doc]
    words = body[body != dh.EOS] - dh.FIRST_WORD
    runs = np.split(words, np.flatnonzero(np.diff(words) != 1) + 1)  # one run per document read
    assert len(runs) <= rec["documents_read"] and (body == dh.EOS).sum() >= len(runs) - 1


def test_fingerprint_is_datasets_own_and_follows_the_file(tmp_path, toks):
    from datasets import load_dataset, load_from_disk

    path = dh.write_jsonl(tmp_path / "docs.jsonl", DOCS)
    _, before = resolve_dataset(_inputs(str(path)), toks["plain"], VOCAB, tmp_path)
    prepared = load_dataset("json", data_files=[str(path)], split="train", cache_dir=str(tmp_path / "c"))
    assert before["dataset_fingerprint"] == prepared._fingerprint
    time.sleep(0.01)                                            # past the file system's mtime resolution
    dh.write_jsonl(path, [d + " w0" for d in DOCS])            # every document edited
    _, after = resolve_dataset(_inputs(str(path)), toks["plain"], VOCAB, tmp_path)
    assert after["dataset_fingerprint"] != before["dataset_fingerprint"]
    assert after["documents_sha256"] != before["documents_sha256"]
    disk = dh.write_disk(tmp_path / "disk", DOCS)
    _, saved = resolve_dataset(_inputs(str(disk)), toks["plain"], VOCAB, tmp_path)
    assert saved["dataset_fingerprint"] == load_from_disk(str(disk))._fingerprint
    dh.write_disk(tmp_path / "disk2", DOCS[::-1])
    _, other = resolve_dataset(_inputs(str(tmp_path / "disk2")), toks["plain"], VOCAB, tmp_path)
    assert other["dataset_fingerprint"] != saved["dataset_fingerprint"]


def test_streams_read_only_what_the_windows_need(tmp_path, toks):
    """Three data files, the last one corrupt: 2 windows are drawn from the first file's
    stream (the shuffle buffer fills there), so the corrupt file is never opened; asking for
    more tokens than the first files hold reaches it, and that is one line."""
    lengths = [L] * (SHUFFLE_BUFFER + 500)
    docs = dh.corpus(lengths)
    dh.write_jsonl(tmp_path / "part-0.jsonl", docs[:SHUFFLE_BUFFER + 200])
    dh.write_jsonl(tmp_path / "part-1.jsonl", docs[SHUFFLE_BUFFER + 200:])
    (tmp_path / "part-2.jsonl").write_text('{"text": "w0"}\n{"text": broken\n')
    tokens, rec = resolve_dataset(_inputs("part-*.jsonl", sequences=2), toks["plain"], VOCAB, tmp_path)
    _assert_inside_documents(tokens, rec, lengths, bos=False)
    assert rec["documents_read"] == 2 and rec["dataset_file_count"] == 3
    with pytest.raises(ConfigError, match=r"^inputs\.dataset: cannot read .*part-\*\.jsonl \(ArrowInvalid"):
        resolve_dataset(_inputs("part-*.jsonl", sequences=2, length=50_000, windows="packed"),
                        toks["plain"], VOCAB, tmp_path)


def test_text_files_are_one_document_each(tmp_path, toks):
    for i, d in enumerate(DOCS[:6]):
        (tmp_path / f"doc{i}.txt").write_text(d.replace(" ", "\n"))     # lines are not documents
    tokens, rec = resolve_dataset(_inputs("doc*.txt", sequences=2, length=8), toks["bos"], VOCAB, tmp_path)
    for k, doc in enumerate(rec["sequence_documents"]):
        want = dh.FIRST_WORD + dh.word_start(LENGTHS, doc) + np.arange(7)
        np.testing.assert_array_equal(tokens[k], np.concatenate([[dh.BOS], want]))


def test_bos_rule_on_packed_text(tmp_path, toks):
    """inputs.text with `bos`: BOS + length - 1 consecutive tokens per window; without it,
    the joined text keeps the tokenizer's own special tokens (only window 0 has a BOS)."""
    from sweep.plan.inputs import read_text
    from sweep.plan.windows import text_tokens

    (tmp_path / "t.txt").write_text(DOCS[0] + " " + DOCS[1])
    source = read_text("t.txt", tmp_path)
    ruled, rec = text_tokens(source, InputsConfig(2, 8, text="t.txt", bos="auto"), toks["bos"], VOCAB, "w", "m")
    want = dh.FIRST_WORD + np.arange(14).reshape(2, 7)
    np.testing.assert_array_equal(ruled, np.hstack([np.zeros((2, 1), np.int64), want]))
    assert rec == {"windows": "packed", "bos": "auto", "bos_token_id": dh.BOS, "position0_is_bos": True}
    legacy, rec = text_tokens(source, InputsConfig(2, 8, text="t.txt"), toks["bos"], VOCAB, "w", "m")
    np.testing.assert_array_equal(legacy.ravel(), np.concatenate([[dh.BOS], dh.FIRST_WORD + np.arange(15)]))
    assert rec == {}
