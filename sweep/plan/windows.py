"""Token windows from documents: what each sequence holds, its position 0, and the record.

`inputs.windows: document` (the default for datasets): sequence k is one document long
enough for `length` tokens, read from its start (`offset: start`) or from a seeded offset
(`offset: random`), so no window spans two documents. `windows: packed`: the documents in
their shuffled order, each followed by a separator (the tokenizer's EOS, else the tokens of
a blank line), cut into consecutive windows, which may span documents.

`inputs.bos` decides position 0. `auto` puts a BOS where the tokenizer adds one itself
(`add_special_tokens`: LLaMA-family tokenizers do, GPT-2/NeoX ones do not), `always` and
`never` force it. With a BOS every sequence starts with it and holds length - 1 tokens of
its document(s); LLaMA-family models were trained that way, and their position 0 is an
attention sink whose J_tt differs from that of a mid-text token.

`resolve_dataset(inputs, tokenizer, vocab_size, base_dir)` is the whole path for
`inputs.dataset`; `text_tokens` applies the same BOS rule to `inputs.text` when it is set.
"""
from __future__ import annotations

import bisect
import hashlib

import numpy as np

from sweep.errors import ConfigError
from sweep.plan.documents import Documents, open_documents
from sweep.plan.inputs import check_ids, text_ids


def bos_token(tokenizer, rule: str, name: str) -> int | None:
    """The id every sequence starts with under `rule`, or None for no BOS."""
    if rule == "never":
        return None
    bos = tokenizer.bos_token_id
    if rule == "always" and bos is None:
        raise ConfigError(f"inputs.bos: always, but {name}'s tokenizer has no BOS token — use "
                          f"bos: auto or never, or a tokenizer with one")
    return bos if rule == "always" or (bos is not None and adds_bos(tokenizer)) else None


def adds_bos(tokenizer) -> bool:
    """Whether the tokenizer puts its BOS in front of a text's own tokens by itself."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    special = tokenizer("a", add_special_tokens=True)["input_ids"]
    return special[:1] == [tokenizer.bos_token_id] and plain[:1] != special[:1]


def bos_record(rule: str, bos: int | None) -> dict:
    return {"bos": rule, "bos_token_id": bos, "position0_is_bos": bos is not None}


def _encoder(tokenizer):
    """text -> (n,) int64 ids without special tokens: BOS is placed per window, not per text."""
    def encode(text: str) -> np.ndarray:
        ids = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
        return np.asarray(ids, dtype=np.int64)
    return encode


def _cut(ids: np.ndarray, sequences: int, length: int, bos: int | None) -> np.ndarray:
    """(n,) ids -> (S, L): consecutive windows of L tokens, or of BOS + L - 1 tokens."""
    body = length - (bos is not None)
    rows = ids[: sequences * body].reshape(sequences, body)
    if bos is None:
        return rows
    return np.hstack([np.full((sequences, 1), bos, dtype=np.int64), rows])


# ---------------------------------------------------------------- inputs.text

def text_tokens(source, inputs, tokenizer, vocab_size: int, name: str, model: str):
    """(S, L) int64 ids of `inputs.text` and the BOS record. Without `inputs.bos` the joined
    text is tokenized with the tokenizer's own special tokens, as before `bos` existed."""
    S, L = inputs.sequences, inputs.length
    if inputs.bos is None:
        return text_ids(source, tokenizer, name, S, L, vocab_size, model), {}
    bos = bos_token(tokenizer, inputs.bos, name)
    ids = _encoder(tokenizer)(source.text)                       # (n,)
    need = S * (L - (bos is not None))
    if ids.size < need:
        raise ConfigError(f"inputs.text: {source.spec} gives {ids.size} tokens with {name}'s "
                          f"tokenizer, need {need} (sequences x length, less one BOS each) — use "
                          f"a longer text or fewer tokens")
    tokens = _cut(ids, S, L, bos)
    check_ids(tokens, name, vocab_size, model)
    return tokens, {"windows": "packed", **bos_record(inputs.bos, bos)}


# ---------------------------------------------------------------- inputs.dataset

def resolve_dataset(inputs, tokenizer, vocab_size: int, base_dir, name: str = "the model",
                    model: str = "the model"):
    """`inputs.dataset` -> ((S, L) int64 token ids, the JSON-able record of where they came
    from). The same config and data give the same windows, bit for bit."""
    docs = open_documents(inputs.dataset, inputs.dataset_config, inputs.split,
                          inputs.column or "text", base_dir)
    return dataset_tokens(docs, inputs, tokenizer, vocab_size, name, model)


def dataset_tokens(docs: Documents, inputs, tokenizer, vocab_size: int, name: str, model: str):
    """The windows of an opened split (see resolve_dataset)."""
    S, L = inputs.sequences, inputs.length
    rule, windows = inputs.bos or "auto", inputs.windows or "document"
    bos = bos_token(tokenizer, rule, name)
    shuffle_seed, offset_seed = np.random.SeedSequence(inputs.seed).spawn(2)
    found = docs.shuffled(shuffle_seed, inputs.min_chars or 0)
    encode, digest = _encoder(tokenizer), hashlib.sha256()
    if windows == "document":
        offset_rng = np.random.default_rng(offset_seed) if inputs.offset == "random" else None
        tokens, starts, read, got = _document_windows(found, encode, digest, S, L, bos, offset_rng)
    else:
        eos = tokenizer.eos_token_id
        sep = np.asarray([eos], dtype=np.int64) if eos is not None else encode("\n\n")
        tokens, starts, read, got = _packed_windows(found, encode, digest, S, L, bos, sep)
    found.close()                                   # the rest of the stream is never read
    if tokens is None:
        raise _too_few(docs, inputs, windows, read, got, L - (bos is not None), name)
    check_ids(tokens, name, vocab_size, model)
    record = {**docs.record(), "min_chars": inputs.min_chars or 0,
              "shuffle": docs.shuffle_note(inputs.seed), "windows": windows,
              "offset": (inputs.offset or "start") if windows == "document" else None,
              **bos_record(rule, bos),
              "sequence_documents": [d for d, _ in starts], "sequence_offsets": [o for _, o in starts],
              "documents_read": read, "documents_sha256": digest.hexdigest()}
    if windows == "packed":
        record["separator"] = sep.tolist()
    return tokens, record


def _document_windows(found, encode, digest, S: int, L: int, bos, offset_rng):
    """Sequence k: the k-th shuffled document with >= L (less BOS) tokens, one window of it.
    Returns ((S, L) tokens or None when too few qualify, [(doc, offset)], documents read,
    documents that qualified)."""
    body = L - (bos is not None)
    rows, starts, read = [], [], 0
    for index, text in found:
        read += 1
        ids = encode(text)                                       # (n,)
        if ids.size < max(body, 1):
            continue
        offset = 0 if offset_rng is None else int(offset_rng.integers(0, ids.size - body + 1))
        rows.append(_cut(ids[offset:], 1, L, bos)[0])
        starts.append((index, offset))
        digest.update(text.encode("utf-8", "surrogatepass") + b"\x00")
        if len(rows) == S:
            return np.stack(rows), starts, read, S
    return None, starts, read, len(rows)


def _packed_windows(found, encode, digest, S: int, L: int, bos, sep: np.ndarray):
    """The shuffled documents, each + `sep`, joined and cut into S windows. A window's start
    is (document, offset): the document holding its first token after BOS, and that token's
    position in the document's ids (its separator counted at the end)."""
    body = L - (bos is not None)
    need, parts, first, total, read = S * body, [], [], 0, 0
    for index, text in found:
        read += 1
        ids = np.concatenate([encode(text), sep])
        parts.append(ids)
        first.append((total, index))
        total += ids.size
        digest.update(text.encode("utf-8", "surrogatepass") + b"\x00")
        if total >= need:
            break
    if total < need:
        return None, [], read, total
    positions = [p for p, _ in first]
    starts = []
    for k in range(S):
        j = bisect.bisect_right(positions, k * body) - 1
        starts.append((first[j][1], k * body - first[j][0]))
    return _cut(np.concatenate(parts), S, L, bos), starts, read, total


def _too_few(docs: Documents, inputs, windows: str, read: int, got: int, body: int, name: str):
    what = f"{docs.spec} (split {docs.split}, min_chars {inputs.min_chars or 0})"
    if windows == "packed":
        return ConfigError(f"inputs.dataset: {what} gives {got} tokens in {read} documents "
                           f"with {name}'s tokenizer, need {inputs.sequences * body} — use fewer "
                           f"or shorter sequences, a lower min_chars, or a larger dataset")
    return ConfigError(f"inputs.dataset: {got} of the {read} documents of {what} have at "
                       f"least {body} tokens with {name}'s tokenizer, need one per sequence "
                       f"({inputs.sequences}) — use fewer or shorter sequences, a lower "
                       f"min_chars, windows: packed, or a dataset with longer documents")
