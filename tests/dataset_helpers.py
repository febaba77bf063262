"""Corpora and tokenizers of known truth for the `inputs.dataset` tests.

Every word of a corpus is unique (`w0`, `w1`, ... in reading order), and the word-level
tokenizers map word `wN` to id N + 3, so a token id alone says which document it came from
and where in it: a window's truth needs no tokenizer. `bos` tokenizers add `<s>` (id 0)
the way LLaMA-family ones do (a post-processor applied by `add_special_tokens`); `plain`
ones have the same `<s>` and never add it, like GPT-2's.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

BOS, EOS, FIRST_WORD = 0, 1, 3


def lengths(n_docs: int = 40, seed: int = 0) -> list[int]:
    """Document lengths in words: a mix of short (< 16) and long ones."""
    rng = np.random.default_rng(seed)
    return [int(n) for n in rng.integers(2, 40, size=n_docs)]


def corpus(doc_lengths: list[int]) -> list[str]:
    """Documents of unique words: document i holds words starts[i] .. starts[i] + n_i - 1."""
    starts = np.concatenate([[0], np.cumsum(doc_lengths)[:-1]])
    return [" ".join(f"w{s + j}" for j in range(n)) for s, n in zip(starts, doc_lengths)]


def word_start(doc_lengths: list[int], index: int) -> int:
    return int(sum(doc_lengths[:index]))


def write_tokenizer(path: Path, n_words: int, adds_bos: bool, bos_token: bool = True) -> Path:
    """A word-level tokenizer saved with save_pretrained: `<s>` 0, `</s>` 1, `<unk>` 2, wN N+3."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<s>": BOS, "</s>": EOS, "<unk>": 2, **{f"w{i}": FIRST_WORD + i for i in range(n_words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if adds_bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", BOS)])
    special = {"bos_token": "<s>"} if bos_token else {}
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", unk_token="<unk>",
                            **special).save_pretrained(path)
    return path


def load(path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def write_jsonl(path: Path, docs: list[str], column: str = "text", **more) -> Path:
    rows = ({column: d, **{k: v[i] for k, v in more.items()}} for i, d in enumerate(docs))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_parquet(path: Path, docs: list[str], **more) -> Path:
    from datasets import Dataset

    Dataset.from_dict({"text": docs, **more}).to_parquet(str(path))
    return path


def write_disk(path: Path, splits: dict[str, list[str]] | list[str]) -> Path:
    """save_to_disk of one Dataset (a list) or of a DatasetDict ({split: docs})."""
    from datasets import Dataset, DatasetDict

    if isinstance(splits, dict):
        DatasetDict({k: Dataset.from_dict({"text": v}) for k, v in splits.items()}).save_to_disk(str(path))
    else:
        Dataset.from_dict({"text": splits}).save_to_disk(str(path))
    return path
