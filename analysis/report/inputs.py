"""The report's account of the tokens: dataset, documents, windows and position 0, from a
model group's `inputs` attribute (sweep/plan/windows.py and sweep/plan/inputs.py write it)."""
from __future__ import annotations

_SHOWN = 16                       # sequences listed with their document and offset


def inputs_lines(i: dict) -> list[str]:
    """Markdown sub-bullets for the report's `- inputs:` line."""
    lines = [dataset_line(i), windows_line(i)] if i.get("dataset") else []
    return [f"  - {line}" for line in (*lines, position0_line(i))]


def dataset_line(i: dict) -> str:
    where = ", ".join(x for x in (
        i.get("dataset_kind"), i.get("dataset_config") and f"config {i['dataset_config']}",
        f"split {i.get('split')}", i.get("dataset_revision") and f"revision {i['dataset_revision']}",
        f"fingerprint {i.get('dataset_fingerprint')}") if x)
    rows = f", {i['dataset_rows']} rows" if i.get("dataset_rows") is not None else ""
    return (f"dataset `{i['dataset']}` ({where}{rows}); column `{i.get('column')}`, documents of "
            f">= {i.get('min_chars', 0)} characters, {i.get('shuffle')}")


def windows_line(i: dict) -> str:
    docs, offs = i.get("sequence_documents", []), i.get("sequence_offsets", [])
    pairs = ", ".join(f"{k} → {d} @ {o}" for k, (d, o) in enumerate(zip(docs, offs)) if k < _SHOWN)
    more = f", … ({len(docs) - _SHOWN} more in the group's `inputs` attribute)" if len(docs) > _SHOWN else ""
    read = (f"{i.get('documents_read')} documents read, sha256 of the documents used "
            f"{str(i.get('documents_sha256', ''))[:12]}…")
    if i.get("windows") == "packed":
        how = (f"packed (the documents joined, each followed by separator ids "
               f"{i.get('separator')}, and cut: a sequence may span documents)")
    else:
        start = "a seeded token offset" if i.get("offset") == "random" else "its start"
        how = f"document (each sequence is one document, from {start}: none spans two)"
    return f"windows: {how}. Sequence → document @ token offset: {pairs}{more}; {read}"


def position0_line(i: dict) -> str:
    if "bos" in i:
        if i.get("position0_is_bos"):
            return (f"position 0: BOS (token id {i.get('bos_token_id')}) in every sequence "
                    f"(`bos: {i['bos']}`)")
        why = ": the tokenizer adds none" if i["bos"] == "auto" else ""
        return f"position 0: a text token, no BOS (`bos: {i['bos']}`{why})"
    if i.get("text"):
        return ("position 0: no BOS rule (the store predates `inputs.bos`, or it was unset): the "
                "joined text was tokenized with the tokenizer's own special tokens, so only "
                "sequence 0 can start with a BOS")
    return "position 0: a random id like every other position, no BOS"
