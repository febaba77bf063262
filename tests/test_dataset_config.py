"""`inputs.dataset` through the config, the store and the report: each bad input is one line
before any compute; a hub id reads the local `datasets` cache when the hub is out of reach;
a LLaMA with a BOS-adding tokenizer gets BOS at position 0 of every stored sequence, and
`tdos analyze` prints the record.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dataset_helpers as dh
import numpy as np
import pytest
import zarr
import yaml

from sweep.config.identity import fingerprint
from sweep.config.load import config_from_dict
from sweep.errors import ConfigError
from sweep.plan.make import load_plan as load_config

ROOT = Path(__file__).resolve().parents[1]
BYTES_MAMBA = ROOT / "checkpoints" / "tiny-mamba-bytes"      # byte-level tokenizer, no BOS
DOCS = ["short", "a document long enough " * 3, "another long enough document " * 3]


def _config(tmp_path, model: Path = BYTES_MAMBA, **inputs) -> str:
    doc = {"model": {"path": str(model)}, "inputs": {"sequences": 2, "length": 16, **inputs},
           "layers": [0], "store": str(tmp_path / "run.zarr")}
    p = tmp_path / "cfg.yaml"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


def test_dataset_tokens_and_record_reach_the_config(tmp_path):
    dh.write_jsonl(tmp_path / "docs.jsonl", DOCS)
    plan = load_config(_config(tmp_path, dataset="docs.jsonl"))
    cfg = plan.config
    (m,) = plan.models
    assert m.inputs["dataset"] == str((tmp_path / "docs.jsonl").resolve())
    assert sorted(m.inputs["sequence_documents"]) == [1, 2]      # "short" has < 16 bytes
    for k, d in enumerate(m.inputs["sequence_documents"]):
        np.testing.assert_array_equal(m.tokens[k], np.frombuffer(DOCS[d][:16].encode(), np.uint8))
    # unset dataset fields stay out of the fingerprint: stores made before them still match
    plain = config_from_dict({"model": {"path": str(BYTES_MAMBA)}, "inputs": {"sequences": 1, "length": 4},
                              "layers": [0], "store": str(tmp_path / "r.zarr")})
    assert set(cfg_inputs(plain)) == {"sequences", "length", "seed", "text"}
    assert fingerprint(cfg) != fingerprint(load_config(_config(tmp_path, dataset="docs.jsonl",
                                                               bos="never")).config)


def cfg_inputs(cfg) -> dict:
    from sweep.config.identity import identity_dict

    return identity_dict(cfg)["inputs"]


def _bad(tmp_path) -> dict:
    d = tmp_path
    dh.write_jsonl(d / "docs.jsonl", DOCS)
    dh.write_jsonl(d / "body.jsonl", DOCS, column="body")
    dh.write_parquet(d / "nums.parquet", DOCS, n=list(range(len(DOCS))))
    (d / "mixed.jsonl").write_text('{"text": "ok ok ok ok ok ok ok ok"}\n{"text": 5}\n')
    (d / "bad.jsonl").write_text('{"text": "ok"}\n{"text": broken\n')
    (d / "empty.jsonl").write_text("")
    (d / "notes.md").write_text("# not a data file")
    dh.write_disk(d / "dict", {"train": DOCS, "test": DOCS})
    (d / "plain_dir").mkdir()
    (d / "mix").mkdir()
    dh.write_jsonl(d / "mix" / "a.jsonl", DOCS)
    dh.write_parquet(d / "mix" / "b.parquet", DOCS)
    (d / "t.txt").write_text("text " * 20)
    return {
        "both": (dict(text="t.txt", dataset="docs.jsonl"), r"^inputs\.dataset: give either `text` or `dataset`, not both"),
        "missing column": (dict(dataset="body.jsonl"), r"^inputs\.column: .*body\.jsonl has no column 'text' \(columns: body\) — set"),
        "non-text column": (dict(dataset="nums.parquet", column="n"), r"^inputs\.column: column 'n' of .* holds int64 values, not text"),
        "non-text value": (dict(dataset="mixed.jsonl"), r"^inputs\.column: column 'text' of .* holds int values \(row 1: '5'\)"),
        "too few": (dict(dataset="docs.jsonl", sequences=3), r"^inputs\.dataset: 2 of the 3 documents of .* have at least 16 tokens .* need one per sequence \(3\)"),
        "too few packed": (dict(dataset="docs.jsonl", windows="packed", length=999), r"^inputs\.dataset: .* gives \d+ tokens in 3 documents .* need 1998"),
        "split of a dict": (dict(dataset="dict", split="validation"), r"^inputs\.split: dict has no split 'validation' \(splits: test, train\) — use one"),
        "split of files": (dict(dataset="docs.jsonl", split="test"), r"^inputs\.split: docs\.jsonl has no split 'test' \(splits: train\)"),
        "not save_to_disk": (dict(dataset="plain_dir"), r"^inputs\.dataset: plain_dir is a directory but not a datasets save_to_disk directory"),
        "no match": (dict(dataset="*.parquetx"), r"^inputs\.dataset: glob \*\.parquetx matches no files"),
        "no such file": (dict(dataset="data/train.jsonl"), r"^inputs\.dataset: no file, directory or glob matches 'data/train\.jsonl' and it is not a hub id"),
        "extension": (dict(dataset="notes.md"), r"^inputs\.dataset: notes\.md is not a data file datasets reads here"),
        "mixed kinds": (dict(dataset="mix/*"), r"^inputs\.dataset: mix/\* mixes json and parquet files"),
        "malformed": (dict(dataset="bad.jsonl"), r"^inputs\.dataset: cannot read .*bad\.jsonl \(ArrowInvalid: JSON parse error"),
        "empty file": (dict(dataset="empty.jsonl"), r"^inputs\.dataset: .*empty\.jsonl is empty — give data files"),
        "config of files": (dict(dataset="docs.jsonl", dataset_config="x"), r"^inputs\.dataset_config: only a hub dataset has configurations"),
        "split alone": (dict(split="train"), r"^inputs\.split: only used with inputs\.dataset"),
        "document text": (dict(text="t.txt", windows="document"), r"^inputs\.windows: document windows need inputs\.dataset"),
        "bos random": (dict(bos="always"), r"^inputs\.bos: random token ids have no documents or BOS"),
        "bos value": (dict(dataset="docs.jsonl", bos="sometimes"), r"^inputs\.bos: 'sometimes' is not one of auto, always, never"),
        "windows value": (dict(dataset="docs.jsonl", windows="docs"), r"^inputs\.windows: 'docs' is not one of document, packed"),
        "min_chars": (dict(dataset="docs.jsonl", min_chars=-1), r"^inputs\.min_chars: must be >= 0, got -1"),
        "offset packed": (dict(dataset="docs.jsonl", windows="packed", offset="random"), r"^inputs\.offset: only document windows"),
        "always without bos": (dict(dataset="docs.jsonl", bos="always"), r"^inputs\.bos: always, but .* has no BOS token"),
    }


BAD = ["both", "missing column", "non-text column", "non-text value", "too few", "too few packed",
       "split of a dict", "split of files", "not save_to_disk", "no match", "no such file",
       "extension", "mixed kinds", "malformed", "empty file", "config of files", "split alone",
       "document text", "bos random", "bos value", "windows value", "min_chars", "offset packed",
       "always without bos"]


@pytest.mark.parametrize("kind", BAD)
def test_bad_dataset_input_is_one_line(tmp_path, kind):
    changes, pattern = _bad(tmp_path)[kind]
    with pytest.raises(ConfigError, match=pattern) as e:
        load_config(_config(tmp_path, **changes))
    assert "\n" not in str(e.value)


def test_dataset_for_a_checkpoint_without_tokenizer(tmp_path, tiny_checkpoints):
    dh.write_jsonl(tmp_path / "docs.jsonl", DOCS)
    with pytest.raises(ConfigError, match=r"^inputs\.dataset: .* ships no tokenizer to read the text "
                                          r"with — set inputs\.tokenizer .* or remove `dataset`"):
        load_config(_config(tmp_path, tiny_checkpoints["mamba"], dataset="docs.jsonl"))


# ---------------------------------------------------------------- hub ids: the datasets cache

HASH = "0123456789abcdef0123456789abcdef01234567"     # the commit a hub download would record
DRIVER = """
import contextlib, io, json, os, sys, time
from sweep.cli import main
from sweep.plan.make import load_plan
for path in sys.argv[1:]:
    err, t0 = io.StringIO(), time.monotonic()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["sweep", path, "--dry-run"])
    said, seconds = err.getvalue(), time.monotonic() - t0
    rec = load_plan(path).models[0].inputs if code == 0 else None
    if rec is not None and os.environ.get("HF_HUB_OFFLINE") == "1":   # datasets' own answer
        from datasets import load_dataset
        rec["load_dataset_fingerprint"] = load_dataset("tdostiny", split=rec["split"])._fingerprint
    print(json.dumps({"code": code, "err": said, "record": rec, "seconds": seconds}))
"""


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    """A `datasets` cache holding hub dataset `tdostiny` (splits train, test), prepared by the
    parquet builder a hub download uses, from parquet files written here."""
    from datasets.packaged_modules.parquet.parquet import Parquet

    d = tmp_path_factory.mktemp("hub")
    files = {s: [str(dh.write_parquet(d / f"{s}.parquet", DOCS if s == "train" else DOCS[::-1]))]
             for s in ("train", "test")}
    Parquet(cache_dir=str(d / "cache"), dataset_name="tdostiny", config_name="default",
            config_id="default", hash=HASH, data_files=files).download_and_prepare()
    return d / "cache"


def _dry_runs(tmp_path, cache: Path, configs: list[dict], offline_env: bool = True) -> list[dict]:
    paths = []
    for i, inputs in enumerate(configs):
        (tmp_path / str(i)).mkdir()
        paths.append(_config(tmp_path / str(i), **inputs))
    env = {**os.environ, "HF_DATASETS_CACHE": str(cache)}
    env.pop("HF_HUB_OFFLINE", None)
    if offline_env:
        env["HF_HUB_OFFLINE"] = "1"
    out = subprocess.run([sys.executable, "-c", DRIVER, *paths], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_hub_id_from_the_local_cache_offline(tmp_path, hub_cache):
    ok, nope, config, absent = _dry_runs(tmp_path, hub_cache, [
        dict(dataset="tdostiny", split="test"), dict(dataset="tdostiny", split="nope"),
        dict(dataset="tdostiny", dataset_config="other"), dict(dataset="tdos-test/absent")])
    rec = ok["record"]
    assert ok["code"] == 0 and ok["err"] == ""
    assert (rec["dataset_kind"], rec["dataset_revision"], rec["split"]) == ("cache", HASH, "test")
    assert rec["dataset_fingerprint"] == rec["load_dataset_fingerprint"]
    assert sorted(rec["sequence_documents"]) == [0, 1]            # DOCS reversed: "short" is row 2
    for r, pattern in ((nope, r"inputs\.split: tdostiny has no split 'nope' \(splits: test, train\)"),
                       (config, r"inputs\.dataset_config: cannot read tdostiny \(ValueError: Couldn't find cache for tdostiny for config 'other'"),
                       (absent, r"inputs\.dataset: tdos-test/absent is not in the local datasets cache and the hub is unreachable")):
        assert r["code"] == 2 and r["err"].count("\n") == 1, r
        assert re_match(pattern, r["err"]), r["err"]


def re_match(pattern: str, err: str) -> bool:
    import re

    return re.match(r"tdos: error: " + pattern, err) is not None


def test_unreachable_hub_is_not_waited_for(tmp_path, hub_cache):
    """Without HF_HUB_OFFLINE, an unreachable hub is seen in one probe: datasets' own
    retries (~25 s) never start, and the cache answers."""
    from sweep.checkpoints.hub import hub_reachable

    if hub_reachable():
        pytest.skip("the Hugging Face hub answers from here: this checks the unreachable case")
    ok, absent = _dry_runs(tmp_path, hub_cache, [dict(dataset="tdostiny"), dict(dataset="nobody/nothing")],
                           offline_env=False)
    assert ok["seconds"] < 15 and absent["seconds"] < 15, (ok["seconds"], absent["seconds"])
    assert ok["code"] == 0 and ok["record"]["dataset_kind"] == "cache"
    assert absent["code"] == 2 and "is not in the local datasets cache" in absent["err"]


# ---------------------------------------------------------------- a LLaMA sweep on a dataset

def test_llama_sweep_on_a_dataset_starts_every_sequence_with_bos(tmp_path, tiny_checkpoints, client):
    """The tiny LLaMA (64 ids) with a BOS-adding word tokenizer: the stored tokens start with
    BOS, the group's `inputs` attribute holds the record, and report.md prints it."""
    from analysis import open_store
    from sweep.cli import main
    from sweep.run import run_sweep

    tok = dh.write_tokenizer(tmp_path / "tok", 61, adds_bos=True)            # ids 0..63
    lengths = [12, 3, 12, 12, 12]
    dh.write_disk(tmp_path / "docs", {"train": dh.corpus(lengths)})
    plan = load_config(_config(tmp_path, tiny_checkpoints["llama"], dataset="docs", tokenizer=str(tok),
                               length=8, seed=1))
    result = run_sweep(plan, client=client, progress=False)
    assert result.exit_code == 0
    st = open_store(plan.store).model(plan.models[0].name)
    cfg = plan.config
    rec = st.inputs
    for k, doc in enumerate(rec["sequence_documents"]):
        want = dh.FIRST_WORD + dh.word_start(lengths, doc) + np.arange(7)
        np.testing.assert_array_equal(st.tokens(k), np.concatenate([[dh.BOS], want]))
    assert (rec["bos"], rec["position0_is_bos"], rec["dataset_kind"]) == ("auto", True, "disk")
    assert main(["analyze", cfg.store, "--out", str(tmp_path / "report")]) == 0
    md = (tmp_path / "report" / "report.md").read_text()
    assert f"- inputs: 2 sequence(s) x 8 tokens of dataset `{rec['dataset']}` (document windows)" in md
    assert f"dataset `{rec['dataset']}` (disk, split train, fingerprint {rec['dataset_fingerprint']}" in md
    assert "position 0: BOS (token id 0) in every sequence (`bos: auto`)" in md
    # skip_positions left unset is recorded as `auto`, and auto drops the BOS position
    assert zarr.open_group(cfg.store, mode="r").attrs["analysis"]["skip_positions"] == "auto"
    assert "position t < 1 left out of every number (auto: " in md
    assert "2 token positions dropped" in md
    pairs = ", ".join(f"{k} → {d} @ 0" for k, d in enumerate(rec["sequence_documents"]))
    assert f"Sequence → document @ token offset: {pairs};" in md


def test_shipped_dataset_config_is_valid_up_to_the_hub(tmp_path):
    """configs/wikitext.yaml: every field checks out; offline it stops, in one line, where it
    needs the hub (the dataset, or the model when the dataset is already cached)."""
    from sweep.checkpoints.hub import hub_reachable

    if hub_reachable():
        pytest.skip("the Hugging Face hub answers from here: the config would download")
    with pytest.raises(ConfigError, match=r"^(inputs\.dataset: Salesforce/wikitext is not in the local "
                                          r"datasets cache|model\.path: no checkpoint at EleutherAI)"):
        load_config(ROOT / "configs" / "wikitext.yaml", {"store": str(tmp_path / "w.zarr")})
