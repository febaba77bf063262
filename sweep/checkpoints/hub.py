"""The Hugging Face hub and its cache, as the readers use them: a checkpoint's snapshot
(safetensors, else .bin) and a tokenizer given apart from the checkpoint (`inputs.tokenizer`),
each from the cache first and downloaded only when asked and when the hub answers."""
from __future__ import annotations

from pathlib import Path

from sweep.errors import ConfigError, first_line

# what a hub download fetches besides weights: configs and tokenizer files
HUB_META = ["*.json", "*.txt", "*.model"]
# a tokenizer needs one of these (transformers builds an empty one from config.json alone)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
# the files besides config.json and the weights that decide the token ids of a text input
TOKENIZER_IDENTITY = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                      "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json")


def looks_like_hub_id(path: str) -> bool:
    return path.count("/") == 1 and not path.startswith((".", "/", "~")) and "\x00" not in path


def snapshot(repo_id: str, revision, download: bool, has_weights) -> Path | None:
    """The snapshot directory of `repo_id` holding config.json and weights (`has_weights(dir)`):
    from the HF cache, else (when allowed) a download; safetensors first, else .bin."""
    from huggingface_hub import snapshot_download

    for local_only in cache_then_hub(download):
        try:
            for weights in ("*.safetensors", "*.bin"):
                d = Path(snapshot_download(repo_id, revision=revision, local_files_only=local_only,
                                           allow_patterns=HUB_META + [weights]))
                if (d / "config.json").is_file() and has_weights(d):
                    return d
        except Exception:  # hub errors are many types (offline, 404, bad revision): not found
            continue
    return None


def directory_tokenizer(local: Path):
    """The tokenizer saved in directory `local`, or None when it holds none (or none this
    transformers can read)."""
    if not any((Path(local) / name).is_file() for name in TOKENIZER_FILES):
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(local), local_files_only=True)
    except Exception:  # files this transformers cannot read: as if there were none
        return None


def load_tokenizer(source: str, revision: str | None = None, where: str = "inputs.tokenizer"):
    """A tokenizer from a directory or a hub id (HF cache first, then a download); a
    ConfigError naming `where` and the fix when there is none."""
    from sweep.checkpoints.reader import is_dir

    p = Path(str(source)).expanduser()
    if is_dir(p):
        tok = directory_tokenizer(p)
        if tok is None:
            raise ConfigError(f"{where}: {source} holds no tokenizer ({', '.join(TOKENIZER_FILES)}) — "
                              f"set inputs.tokenizer to a directory or hub id that has one")
        return tok
    if not looks_like_hub_id(str(source)):
        raise ConfigError(f"{where}: no tokenizer at {source} (not a directory, not a hub id "
                          f"owner/name) — fix the path")
    from transformers import AutoTokenizer

    why = "the hub is unreachable from here"
    for local_only in cache_then_hub(True):
        try:
            tok = AutoTokenizer.from_pretrained(str(source), revision=revision,
                                                local_files_only=local_only)
            if len(tok) > 0:
                return tok
            why = "its vocabulary is empty"
        except Exception as e:  # 404, gated, unreadable files: say why in one line, below
            why = first_line(e)[:120] if not local_only else why
    raise ConfigError(f"{where}: tokenizer {source} is not in the Hugging Face cache and could not "
                      f"be downloaded ({why}) — download it first (hf download {source}) or give "
                      f"a local directory")


def cache_then_hub(download: bool):
    """`local_files_only` values to try in order: the HF cache first; the hub only after a
    cache miss and only when it answers (a cached model never waits on a network probe)."""
    yield True
    if download and hub_reachable():
        yield False


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face hub answers at all: offline, a download is not attempted
    (huggingface_hub would retry for a minute and print every retry)."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False
