"""Everything about a checkpoint's files, in one place: where it is, what it is, whether its
weights are whole and match its config.json, and its tokenizer.

`inspect_checkpoint` is what validation calls. It reads config.json, the safetensors headers
(or a memory-mapped .bin) and builds the model on the meta device to compare shapes, so a
truncated download, a missing shard or an edited config.json is refused in a second and
before any store exists, never by a traceback halfway through a sweep. `sweep.model` loads
the weights through `locate` and `mamba_ssm_to_hf_config` from here.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from sweep.errors import ConfigError

# model_type -> transformers class: the architectures tdos has block math for
HF_CLASSES = {
    "gpt2": "GPT2LMHeadModel",
    "gpt_neox": "GPTNeoXForCausalLM",
    "llama": "LlamaForCausalLM",
    "mamba": "MambaForCausalLM",
}
SUPPORTED = tuple(HF_CLASSES)
WEIGHT_SUFFIXES = (".safetensors", ".bin")
# what a hub download fetches besides weights: configs and tokenizer files
_HUB_META = ["*.json", "*.txt", "*.model"]
# a tokenizer needs one of these (transformers builds an empty one from config.json alone)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
_SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2,
                      "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
_MAX_HEADER = 100 << 20      # safetensors caps its JSON header at 100 MB


@dataclass(frozen=True)
class ModelInfo:
    """What validation and the plan need, read without loading any weights."""

    arch: str                  # gpt2 | gpt_neox | llama | mamba
    n_layers: int
    d_model: int
    max_length: int | None     # context (positions); None for Mamba
    vocab_size: int            # random token ids are drawn from [0, vocab_size)
    local_dir: Path | None = None
    weight_bytes: int = 0      # bytes of the weight files (memory-mapped by the workers)
    block_params: int = 0      # parameters of one residual block (widened to fp64 when asked)
    d_inner: int | None = None  # Mamba: channels of Δ_t (delta array); None otherwise
    d_state: int | None = None  # Mamba: SSM state size (a_log array)


# ---------------------------------------------------------------- where

def locate(path: str, revision: str | None, where: str, download: bool = False) -> Path:
    """The local directory holding config.json + weights: `path` itself, or the hub snapshot
    (from the HF cache; downloaded only when `download`)."""
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


def is_dir(p: Path) -> bool:
    try:
        return p.is_dir()
    except (OSError, ValueError):     # a NUL byte or a name too long is simply not a directory
        return False


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

def inspect_checkpoint(path: str, revision: str | None, where: str) -> ModelInfo:
    """config.json + weight headers of a local dir or a cached hub id -> ModelInfo; a
    ConfigError naming the file and the fix when anything is missing, corrupt or inconsistent."""
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
    files = weight_files(local)
    if not files:
        raise ConfigError(f"{where}: no checkpoint weights (*.safetensors, *.bin) next to {cfg_file} — "
                          f"download the weights or fix the path")
    config, rename = hf_config(raw, local, where)
    found = {}
    for f in files:
        found.update({rename(k): (shape, f.name) for k, shape in tensor_shapes(f, where).items()})
    model = _meta_model(config, where)
    _check_shapes(model, found, where, cfg_file)
    info = _info(config, local, sum(f.stat().st_size for f in files), model)
    if "model_type" not in raw:     # mamba_ssm pads its embedding; ids beyond the real vocab are unused
        info = dataclasses.replace(info, vocab_size=raw["vocab_size"])
    return info


def hf_config(raw: dict, local: Path, where: str):
    """(transformers config, checkpoint key -> HF key) of an HF or mamba_ssm config.json."""
    if "model_type" in raw:
        arch = raw["model_type"]
        if arch not in SUPPORTED:
            raise ConfigError(f"{where}: architecture {arch!r} (config.json model_type) is not "
                              f"supported — use one of {', '.join(SUPPORTED)}")
        from transformers import AutoConfig

        try:
            return AutoConfig.from_pretrained(str(local), local_files_only=True), str
        except Exception as e:  # transformers raises many types for inconsistent settings
            raise ConfigError(f"{where}: {local / 'config.json'} is inconsistent: {_first_line(e)} — "
                              f"fix config.json or re-download the checkpoint") from None
    if "d_model" in raw and "n_layer" in raw:        # mamba_ssm format (state-spaces/mamba-*)
        try:
            config = mamba_ssm_to_hf_config(raw)
        except ValueError as e:
            raise ConfigError(f"{where}: {e}") from None
        except (TypeError, KeyError) as e:
            raise ConfigError(f"{where}: {local / 'config.json'}: bad mamba_ssm setting "
                              f"({_first_line(e)}) — fix config.json or re-download") from None
        return config, _mamba_ssm_key
    raise ConfigError(f"{where}: {local / 'config.json'} has neither model_type (HF) nor "
                      f"d_model/n_layer (mamba_ssm) — point to a supported checkpoint "
                      f"({', '.join(SUPPORTED)})")


def _mamba_ssm_key(key: str) -> str:
    # the two Mamba layouts differ only in the embedding's name
    return key.replace("backbone.embedding.", "backbone.embeddings.")


def mamba_ssm_to_hf_config(cfg: dict):
    """mamba_ssm config.json dict -> transformers MambaConfig (Mamba-1 blocks only)."""
    from transformers import MambaConfig

    ssm = dict(cfg.get("ssm_cfg") or {})
    unsupported = {
        "ssm_cfg.layer": ssm.get("layer", "Mamba1") != "Mamba1",
        "rms_norm": not cfg.get("rms_norm", True),
        "d_intermediate": cfg.get("d_intermediate", 0) != 0,
        "attn_layer_idx": bool(cfg.get("attn_layer_idx")),
    }
    bad = [k for k, v in unsupported.items() if v]
    if bad:
        raise ValueError(f"mamba_ssm config: unsupported setting(s) {bad} — only Mamba-1 "
                         f"RMSNorm blocks load")
    for key in ("d_model", "n_layer", "vocab_size"):
        if not isinstance(cfg.get(key), int) or isinstance(cfg.get(key), bool) or cfg[key] < 1:
            raise ValueError(f"mamba_ssm config: {key} must be a positive integer, got "
                             f"{cfg.get(key)!r} — fix config.json")
    mult = cfg.get("pad_vocab_size_multiple", 1)
    vocab = cfg["vocab_size"] + (-cfg["vocab_size"]) % mult
    d = cfg["d_model"]
    dt_rank = ssm.get("dt_rank", "auto")
    return MambaConfig(
        vocab_size=vocab,
        hidden_size=d,
        num_hidden_layers=cfg["n_layer"],
        state_size=ssm.get("d_state", 16),
        conv_kernel=ssm.get("d_conv", 4),
        expand=ssm.get("expand", 2),
        time_step_rank=math.ceil(d / 16) if dt_rank == "auto" else dt_rank,
        use_bias=ssm.get("bias", False),
        use_conv_bias=ssm.get("conv_bias", True),
        layer_norm_epsilon=cfg.get("norm_epsilon", 1e-5),
        residual_in_fp32=cfg.get("residual_in_fp32", True),
        tie_word_embeddings=cfg.get("tie_embeddings", True),
    )


def _info(config, local: Path, weight_bytes: int, model) -> ModelInfo:
    arch = config.model_type
    max_len = None if arch == "mamba" else getattr(config, "n_positions", None) or config.max_position_embeddings
    base = getattr(model, "base_model", model)
    blocks = getattr(base, "layers", None) or getattr(base, "h")
    mamba = arch == "mamba"
    return ModelInfo(arch, config.num_hidden_layers, config.hidden_size, max_len, config.vocab_size,
                     local_dir=local, weight_bytes=weight_bytes,
                     block_params=sum(p.numel() for p in blocks[0].parameters()),
                     d_inner=config.intermediate_size if mamba else None,
                     d_state=config.state_size if mamba else None)


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


def _meta_model(config, where: str):
    """The transformers model of `config` on the meta device: shapes only, no memory."""
    import torch
    import transformers

    cls = getattr(transformers, HF_CLASSES[config.model_type])
    try:
        with torch.device("meta"):
            return cls(config)
    except Exception as e:  # inconsistent sizes raise many types inside transformers
        raise ConfigError(f"{where}: config.json settings are inconsistent ({type(e).__name__}: "
                          f"{_first_line(e)}) — fix config.json or re-download the checkpoint") from None


def _check_shapes(model, found: dict, where: str, cfg_file: Path) -> None:
    """Every parameter of `model` is in the weight files (tied ones once), with its shape."""
    expected = model.state_dict(keep_vars=True)
    found = _as_model_keys(model, found, expected)
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
            shape, file = found[k]
            want = tuple(expected[k].shape)
            if shape is not None and shape != want:
                raise ConfigError(f"{where}: weights do not match {cfg_file.name}: {k} is {list(shape)} "
                                  f"in {file}, config.json implies {list(want)} — fix config.json "
                                  f"or re-download the checkpoint")


_LAYER_KEY = re.compile(r"\.(?:layers|h)\.(\d+)\.")


def _check_depth(model, found: dict, expected: dict, where: str, cfg_file: Path) -> None:
    """Weights of a block beyond config.json's depth: from_pretrained would drop them and
    silently sweep a shallower model."""
    n = model.config.num_hidden_layers
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
    prefix = model.base_model_prefix
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightRenaming, rename_source_key
    except ImportError:        # transformers 4: names are the model's own, prefix aside
        return {(f"{prefix}.{k}" if k not in expected and f"{prefix}.{k}" in expected else k): v
                for k, v in found.items()}
    transforms = get_model_conversion_mapping(model)
    renames = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if not isinstance(t, WeightRenaming)]
    out = {}
    for k, (shape, file) in found.items():
        key, converted = rename_source_key(k, renames, converters, prefix, expected)
        out[key] = (None if converted else shape, file)
    return out


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:200] if lines else type(e).__name__


# ---------------------------------------------------------------- tokenizer

def find_tokenizer(local: Path):
    """The tokenizer saved in checkpoint directory `local`, or None when it ships none."""
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
