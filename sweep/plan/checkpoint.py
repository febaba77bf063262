"""Everything about a checkpoint's files, in one place: where it is, what it is, whether its
weights are whole and match its config.json, and its tokenizer.

`inspect_checkpoint` is what the plan calls. It reads config.json, the safetensors headers
(or a memory-mapped .bin) and builds the model on the meta device (sweep/plan/architecture.py) to
compare shapes, so a truncated download, a missing shard or an edited config.json is refused
in a second and before any store exists, never by a traceback halfway through a sweep.
`sweep.worker.model` loads the weights through `locate`. `identity_files` lists the files whose
content decides a sweep's values: config.json and the weights (and the tokenizer's files
when text is read).
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

from sweep.config.validate import is_dir
from sweep.errors import ConfigError
from sweep.plan.architecture import (ModelInfo, Source, hf_config, meta_model, model_info,
                                     rescales_on_first_forward)
from sweep.plan.gguf_file import gguf_tokenizer, inspect_gguf, is_gguf, locate_gguf

WEIGHT_SUFFIXES = (".safetensors", ".bin")
# what a hub download fetches besides weights: configs and tokenizer files
_HUB_META = ["*.json", "*.txt", "*.model"]
# a tokenizer needs one of these (transformers builds an empty one from config.json alone)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
_SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2,
                      "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
_MAX_HEADER = 100 << 20      # safetensors caps its JSON header at 100 MB


# ---------------------------------------------------------------- where

def locate(path: str, revision: str | None, where: str, download: bool = False) -> Path:
    """The local directory holding config.json + weights: `path` itself, or the hub snapshot
    (from the HF cache; downloaded only when `download`); a local GGUF file is its own."""
    if is_gguf(path):
        return locate_gguf(path, where)
    p = Path(str(path)).expanduser()
    if is_dir(p):
        if (p / "config.json").is_file():
            return p
        raise ConfigError(f"{where}: no checkpoint at {path} (directory has no config.json) — "
                          f"give a checkpoint directory or hub id")
    rev = f" at revision {revision}" if revision else ""
    if _looks_like_hub_id(str(path)):
        snap = _hub_snapshot(str(path), revision, download)
        if snap is not None:
            return snap
    hub = "not in the Hugging Face cache nor downloadable" if download else "not in the Hugging Face cache"
    raise ConfigError(f"{where}: no checkpoint at {path}{rev} (not a local directory, {hub}) — "
                      f"download it first or fix the path")


def _looks_like_hub_id(path: str) -> bool:
    return path.count("/") == 1 and not path.startswith((".", "/", "~")) and "\x00" not in path


def _hub_snapshot(repo_id: str, revision, download: bool) -> Path | None:
    """Snapshot from the HF cache, else (when allowed) a download: safetensors, else .bin."""
    from huggingface_hub import snapshot_download

    for local_only in _cache_then_hub(download):
        try:
            for weights in ("*.safetensors", "*.bin"):
                d = Path(snapshot_download(repo_id, revision=revision, local_files_only=local_only,
                                           allow_patterns=_HUB_META + [weights]))
                if (d / "config.json").is_file() and weight_files(d):
                    return d
        except Exception:  # hub errors are many types (offline, 404, bad revision): not found
            continue
    return None


def weight_files(d: Path) -> list[Path]:
    """The weight files transformers would load: every *.safetensors, else every *.bin."""
    files = sorted(f for f in Path(d).iterdir()
                   if f.name.endswith(WEIGHT_SUFFIXES) and not f.name.startswith("training_args"))
    safe = [f for f in files if f.suffix == ".safetensors"]
    return safe or files


# ---------------------------------------------------------------- what

def inspect_checkpoint(path: str, revision: str | None, where: str,
                       trust_remote_code: bool = False) -> ModelInfo:
    """config.json + weight headers of a local dir or a cached hub id -> ModelInfo; a
    ConfigError naming the file and the fix when anything is missing, corrupt, inconsistent
    or not a decoder-only causal LM (sweep/plan/architecture.py). A `.gguf` path is a GGUF
    file (sweep/plan/gguf_file.py)."""
    if is_gguf(path):
        return inspect_gguf(path, revision, where)
    local = locate(path, revision, where)
    cfg_file = local / "config.json"
    try:
        raw = json.loads(cfg_file.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{where}: cannot read {cfg_file}: {_first_line(e)} — fix or "
                          f"re-download the checkpoint") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: {cfg_file} holds {type(raw).__name__}, not a JSON object — "
                          f"fix or re-download the checkpoint")
    # what the model is first (a refused architecture needs no weights), then its weights
    config, rename = hf_config(raw, local, where, trust_remote_code)
    model = meta_model(config, where, trust_remote_code)
    files = weight_files(local)
    if not files:
        raise ConfigError(f"{where}: no checkpoint weights (*.safetensors, *.bin) next to {cfg_file} — "
                          f"download the weights or fix the path")
    found = checkpoint_names(model, local, rename, where)
    _check_shapes(model, found, where, cfg_file)
    info = model_info(config, model, local, sum(f.stat().st_size for f in files))
    info = dataclasses.replace(info, not_local=_not_local(model, found))
    if "model_type" not in raw:     # mamba_ssm pads its embedding; ids beyond the real vocab are unused
        info = dataclasses.replace(info, vocab_size=raw["vocab_size"])
    return info


# ---------------------------------------------------------------- whole

def tensor_shapes(f: Path, where: str) -> dict[str, tuple[int, ...]]:
    """{tensor name: shape} of one weight file, read from its header (safetensors) or a
    memory map (.bin); a truncated or corrupt file is a ConfigError naming it."""
    if f.suffix == ".safetensors":
        return _safetensors_shapes(f, where)
    import torch

    try:
        try:
            sd = torch.load(f, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as e:
            if "zip" in str(e) and "central directory" in str(e):
                raise
            sd = torch.load(f, map_location="cpu", weights_only=True)   # legacy (non-zip) format
    except Exception as e:  # torch raises many types for a damaged file
        raise ConfigError(f"{where}: {f} is truncated or corrupt ({type(e).__name__}: "
                          f"{_first_line(e)}) — re-download the checkpoint") from None
    if not isinstance(sd, dict):
        raise ConfigError(f"{where}: {f} holds {type(sd).__name__}, not a state dict of tensors — "
                          f"point to a checkpoint saved with save_pretrained or mamba_ssm")
    return {k: tuple(v.shape) for k, v in sd.items() if hasattr(v, "shape")}


def _safetensors_shapes(f: Path, where: str) -> dict[str, tuple[int, ...]]:
    # layout: 8-byte little-endian header length, JSON header, then the tensor bytes
    bad = f"{where}: {f} is truncated or corrupt"
    fix = "re-download the checkpoint"
    size = f.stat().st_size
    with open(f, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        if size < 8 or n > min(size - 8, _MAX_HEADER):
            raise ConfigError(f"{bad} ({size} bytes, header claims {n}) — {fix}")
        try:
            header = json.loads(fh.read(n))
        except ValueError as e:
            raise ConfigError(f"{bad} (header is not JSON: {_first_line(e)}) — {fix}") from None
    if not isinstance(header, dict):
        raise ConfigError(f"{bad} (header is not a JSON object) — {fix}")
    shapes, end = {}, 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, stop = t["data_offsets"]
            shape = tuple(int(s) for s in t["shape"])
            nbytes = math.prod(shape) * _SAFETENSORS_BYTES[t["dtype"]]
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{bad} (entry {name!r} of its header is malformed) — {fix}") from None
        if stop - begin != nbytes:
            raise ConfigError(f"{bad} ({name}: {stop - begin} bytes for shape {shape}) — {fix}")
        shapes[name], end = shape, max(end, stop)
    if 8 + n + end > size:
        raise ConfigError(f"{bad} ({size} bytes, its header needs {8 + n + end}; an interrupted "
                          f"download?) — {fix}")
    return shapes


def checkpoint_names(model, local: Path, rename=str, where: str = "model.path") -> dict[str, Source]:
    """{the model's key: its Source} from the weight files' headers, mapped as from_pretrained
    maps them (`rename`: the mamba_ssm layout's names). A layer-local worker reads its layer's
    tensors through it (sweep/generic/local.py)."""
    found = {}
    for f in weight_files(local):
        found.update({rename(k): Source(shape, f.name, k) for k, shape in tensor_shapes(f, where).items()})
    return _as_model_keys(model, found, model.state_dict(keep_vars=True))


def _not_local(model, found: dict[str, Source]) -> str:
    """Why a worker cannot hold one layer of this model (empty: it can). Tensors that
    transformers converts on load (fused MoE experts) are converted per layer by its own
    loader (sweep/generic/local.py); a worker that still fails falls back and says why."""
    if rescales_on_first_forward(model.config):
        return ("RWKV rescales its layers' weights in place on its first forward (rescale_every "
                "below its depth)")
    return ""


def _check_shapes(model, found: dict[str, Source], where: str, cfg_file: Path) -> None:
    """Every parameter of `model` is in the weight files (tied ones once), with its shape."""
    expected = model.state_dict(keep_vars=True)
    _check_depth(model, found, expected, where, cfg_file)
    groups: dict[int, list[str]] = {}
    for k, t in expected.items():
        groups.setdefault(id(t), []).append(k)      # tied weights share one tensor
    for keys in groups.values():
        present = [k for k in keys if k in found]
        if not present:
            raise ConfigError(f"{where}: weights do not match {cfg_file.name}: tensor {keys[0]} is in "
                              f"no weight file (a missing shard, or another model's config.json?) — "
                              f"re-download the checkpoint")
        for k in present:
            shape, file = found[k][:2]
            want = tuple(expected[k].shape)
            if shape is not None and shape != want:
                raise ConfigError(f"{where}: weights do not match {cfg_file.name}: {k} is {list(shape)} "
                                  f"in {file}, config.json implies {list(want)} — fix config.json "
                                  f"or re-download the checkpoint")


_LAYER_KEY = re.compile(r"\.(?:layers|h|blocks)\.(\d+)\.")


def _check_depth(model, found: dict, expected: dict, where: str, cfg_file: Path) -> None:
    """Weights of a block beyond config.json's depth: from_pretrained would drop them and
    silently sweep a shallower model."""
    n = model.config.get_text_config().num_hidden_layers
    for k in found:
        hit = _LAYER_KEY.search(k)
        if k not in expected and hit and int(hit.group(1)) >= n:
            raise ConfigError(f"{where}: weights do not match {cfg_file.name}: {k} belongs to block "
                              f"{hit.group(1)}, config.json has {n} blocks — fix config.json or "
                              f"re-download the checkpoint")


def _as_model_keys(model, found: dict, expected: dict) -> dict:
    """Checkpoint key -> the model's key, as from_pretrained maps them: transformers 5's
    renamings (GPT-NeoX's embed_out -> lm_head) and the base-model prefix that checkpoints
    saved from the bare model (the original gpt2) lack. A key that a converter reshapes
    keeps no shape to compare (None)."""
    from sweep.plan import hf

    rename = hf.checkpoint_renamer(model)
    out = {}
    for k, source in found.items():
        key, converted = rename(k, expected)
        if converted:
            parts = (out[key].parts if key in out else ()) + ((source.file, k),)
            source = source._replace(shape=None, converted=True, parts=parts)
        out[key] = source
    return out


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:200] if lines else type(e).__name__


# ---------------------------------------------------------------- tokenizer

def find_tokenizer(local: Path):
    """The tokenizer saved in checkpoint directory `local` (or in GGUF file `local`'s
    metadata), or None when it ships none."""
    if is_gguf(local):
        return gguf_tokenizer(Path(local))
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
    p = Path(str(source)).expanduser()
    if is_dir(p):
        tok = find_tokenizer(p)
        if tok is None:
            raise ConfigError(f"{where}: {source} holds no tokenizer ({', '.join(TOKENIZER_FILES)}) — "
                              f"set inputs.tokenizer to a directory or hub id that has one")
        return tok
    if not _looks_like_hub_id(str(source)):
        raise ConfigError(f"{where}: no tokenizer at {source} (not a directory, not a hub id "
                          f"owner/name) — fix the path")
    from transformers import AutoTokenizer

    why = "the hub is unreachable from here"
    for local_only in _cache_then_hub(True):
        try:
            tok = AutoTokenizer.from_pretrained(str(source), revision=revision,
                                                local_files_only=local_only)
            if len(tok) > 0:
                return tok
            why = "its vocabulary is empty"
        except Exception as e:  # 404, gated, unreadable files: say why in one line, below
            why = _first_line(e)[:120] if not local_only else why
    raise ConfigError(f"{where}: tokenizer {source} is not in the Hugging Face cache and could not "
                      f"be downloaded ({why}) — download it first (hf download {source}) or give "
                      f"a local directory")


def _cache_then_hub(download: bool):
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
