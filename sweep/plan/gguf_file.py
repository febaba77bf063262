"""A local GGUF file as a checkpoint (docs/models.md, "GGUF files").

`model.path` may name a `.gguf` file. What the model is comes from transformers' own GGUF
reader (its mapping of the file's metadata onto a config, sweep/plan/hf.py); its weights are
the file's tensors, named as from_pretrained(gguf_file=...) names them, dequantized by the
`gguf` package and put back into transformers' layout by transformers' own per-architecture
tensor processor. `GgufFile` is the file memory-mapped: its metadata (string arrays counted,
not read) and tensor table by transformers' reader, each tensor's bytes a view of the map.

`inspect_gguf` is the plan's check, in seconds and before any store exists: a file that is
not a GGUF, truncated or corrupt, of an architecture transformers does not read, whose tensors
do not match the config its metadata implies, or holding a tensor type that cannot be
dequantized is a ConfigError naming the file and the reason. `gguf_sources` gives every model
key the GGUF tensor(s) it is made of: the layer-local reader (sweep/generic/weights.py) reads
a layer's tensors by them. The file's identity is its sha256 (sweep/plan/provenance.py); its
tokenizer is the one in its metadata.

transformers parses the whole metadata, vocabulary included, to build a GGUF's config (seconds
and ~200 MB for a 49k-token vocabulary). The config and the processor's settings are cached in
`$TDOS_CACHE/gguf-config/<sha256>.json` once the plan has built them, so a worker on the same
machine builds its model from the cache and reads none of the vocabulary.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from pathlib import Path
from typing import NamedTuple

from sweep.errors import ConfigError
from sweep.plan.architecture import ModelInfo, Source, meta_model, model_info, refuse

SUFFIX = ".gguf"
_CONFIG_CACHE = "gguf-config"
_CONFIG_VERSION = 1          # of what _build_config corrects: a new one is another cache entry


def is_gguf(path) -> bool:
    """Whether `path` names a GGUF file (by its suffix: it may not exist yet)."""
    return Path(str(path)).suffix.lower() == SUFFIX


def locate_gguf(path, where: str) -> Path:
    """The absolute path of the GGUF file `path`; a ConfigError when there is none."""
    p = Path(str(path)).expanduser()
    if not p.is_file():
        why = "a directory" if p.is_dir() else "no such file"
        raise ConfigError(f"{where}: no GGUF file at {path} ({why}) — fix the path")
    return p.resolve()


def _bad(where: str, file: Path, why: str, fix: str) -> ConfigError:
    return ConfigError(f"{where}: {file}: {why} — {fix}")


class Tensor(NamedTuple):
    name: str
    shape: tuple[int, ...]        # torch order
    qtype: object                 # gguf.GGMLQuantizationType
    start: int                    # byte offset in the file
    nbytes: int


class GgufFile:
    """A GGUF file memory-mapped: `metadata` (string arrays as their length), `tensors`
    {name: Tensor}, and `data(name)` the tensor's bytes as the `gguf` package dequantizes
    them: (..., bytes per row) for a block type, the float values' bytes otherwise."""

    def __init__(self, file: Path):
        import numpy as np
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

        from sweep.plan import hf

        self.file = file
        self.metadata, entries, data_start = hf.gguf_table(file)
        self.tensors: dict[str, Tensor] = {}
        for name, shape, ggml_type, offset in entries:
            qtype = GGMLQuantizationType(ggml_type)
            block, size = GGML_QUANT_SIZES[qtype]
            self.tensors[name] = Tensor(name, tuple(shape), qtype, data_start + offset,
                                        math.prod(shape) // block * size)
        self._blob = np.memmap(file, mode="r", dtype=np.uint8)

    @property
    def architecture(self) -> str:
        return self.metadata["general.architecture"]

    def data(self, name: str):
        """Tensor `name`'s bytes, a view of the map (uint8, rows first: rows can be cut)."""
        from gguf import GGML_QUANT_SIZES

        t = self.tensors[name]
        block, size = GGML_QUANT_SIZES[t.qtype]
        raw = self._blob[t.start:t.start + t.nbytes]
        return raw.reshape(*t.shape[:-1], t.shape[-1] // block * size)


def _state(file: Path) -> tuple:
    """What changes whenever the file is rewritten (the key of the caches below)."""
    s = os.stat(file)
    return (str(file), s.st_size, s.st_mtime_ns, s.st_ctime_ns, s.st_ino)


@functools.lru_cache(maxsize=4)
def _open(state: tuple) -> GgufFile:
    return GgufFile(Path(state[0]))


def read_header(file: Path, where: str) -> GgufFile:
    """The file memory-mapped (no tensor is read); a ConfigError when it is not a GGUF,
    truncated or corrupt, or holds a tensor of a type the `gguf` package does not know."""
    try:
        g = _open(_state(file))
    except Exception as e:  # struct errors, ValueError, UnicodeDecodeError for damaged files
        raise _bad(where, file, f"not a readable GGUF file, truncated or corrupt ({type(e).__name__}: "
                   f"{_first_line(e)})", "re-download or re-convert it") from None
    size = file.stat().st_size
    for t in g.tensors.values():
        if t.start + t.nbytes > size:
            raise _bad(where, file, f"truncated: tensor {t.name} ends at byte {t.start + t.nbytes}, "
                       f"the file has {size}", "re-download or re-convert it")
    return g


@functools.lru_cache(maxsize=4)
def _metadata(state: tuple) -> dict:
    from sweep.plan import hf

    return hf.gguf_metadata(state[0])


def metadata(file: Path, where: str) -> dict:
    """transformers' parse of the file's whole metadata ({"config", "tokenizer", ...}; not to be
    changed: it is cached)."""
    try:
        return _metadata(_state(file))
    except ValueError as e:
        if "not supported" in str(e):
            raise _bad(where, file, f"transformers {_version()} cannot load it ({_first_line(e)})",
                       "convert the model to a safetensors checkpoint, or use an architecture "
                       "transformers reads from GGUF (docs/models.md)") from None
        raise _bad(where, file, f"unreadable metadata ({_first_line(e)})", "re-convert it") from None
    except Exception as e:  # a damaged file fails anywhere in the reader
        raise _bad(where, file, f"unreadable metadata, truncated or corrupt ({type(e).__name__}: "
                   f"{_first_line(e)})", "re-download or re-convert it") from None


def gguf_config(file: Path, where: str):
    """(transformers config, processor config) of GGUF `file`: the config as
    from_pretrained(gguf_file=...) builds it, with what that reader leaves out set from the
    file's own metadata (qwen3's head_dim), refused when tdos cannot sweep it
    (sweep/plan/architecture.py); the processor config is the dict transformers' tensor
    processors read (None for the packed-block loader's architectures). From the cache when
    the plan built them before (module doc)."""
    from transformers import CONFIG_MAPPING

    cache = _config_cache(file)
    if cache.is_file():
        saved = json.loads(cache.read_text())
        config = CONFIG_MAPPING[saved["config"]["model_type"]].from_dict(saved["config"])
        refuse(config, where)
        return config, saved["processor"]
    config, meta = _build_config(file, where)
    _write(cache, {"config": config.to_dict(), "processor": meta})
    return config, meta


def _build_config(file: Path, where: str):
    from transformers import CONFIG_MAPPING, AutoConfig

    from sweep.plan import hf

    packed = hf.gguf_packed_loader(read_header(file, where).architecture)
    meta = None if packed else metadata(file, where)["config"]
    try:
        if packed:
            config = AutoConfig.from_pretrained(str(file.parent), gguf_file=file.name,
                                                local_files_only=True)
        else:       # what AutoConfig.from_pretrained(gguf_file=...) does with the same dict
            config = CONFIG_MAPPING[meta["model_type"]].from_dict(dict(meta))
    except Exception as e:  # transformers raises many types for an inconsistent config
        raise _bad(where, file, f"transformers cannot build its config ({_first_line(e)})",
                   "re-convert it") from None
    _own_head_dim(config, read_header(file, where))
    refuse(config, where)
    return config, meta


def _config_cache(file: Path) -> Path:
    """Where the config of this file's content is cached: keyed by its sha256 and by what
    builds the config from it (transformers' mapping, this module's corrections)."""
    from sweep.plan.hashes import cache_dir, sha256_files

    sha = sha256_files([file], progress=False)[0].sha256
    return cache_dir() / _CONFIG_CACHE / f"{sha}-transformers{_version()}-v{_CONFIG_VERSION}.json"


def _write(path: Path, record: dict) -> None:
    """Written whole (a temporary file, then os.replace); a cache that cannot be written is
    no error: the next process builds the config again."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record, default=str))
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError):
        return


def _own_head_dim(config, g: GgufFile) -> None:
    """transformers 5.25 maps no GGUF key onto qwen3's head_dim (its default, 128, stays): the
    file's `<arch>.attention.key_length` says what it is."""
    if config.model_type not in ("qwen3", "qwen3_moe") or not hasattr(config, "head_dim"):
        return
    key = g.metadata.get(f"{g.architecture}.attention.key_length")
    if isinstance(key, int) and key != config.head_dim:
        config.head_dim = key


def gguf_names(model, meta: dict, g: GgufFile) -> tuple:
    """(transformers' tensor processor of the file's architecture, {GGUF name: model key});
    the map is built once per file state (transformers builds a name map per module: seconds)."""
    from sweep.plan import hf

    processor = hf.gguf_processor(g.architecture, meta)
    key = (_state(g.file), type(model).__name__)
    if key not in _NAMES:
        _NAMES.clear()              # one file at a time
        _NAMES[key] = hf.gguf_names(model, processor)
    return processor, _NAMES[key]


_NAMES: dict = {}


def gguf_sources(model, g: GgufFile, meta: dict) -> dict:
    """{model key: Source} of the GGUF's tensors, mapped by transformers' own name map; `parts`
    lists every GGUF tensor a key is made of (an MoE's experts fuse several)."""
    _, names = gguf_names(model, meta, g)
    parts: dict[str, list[str]] = {}
    for name in g.tensors:
        if name in names:
            parts.setdefault(names[name], []).append(name)
    file = g.file.name
    return {key: Source(None, file, found[0], False, tuple((file, n) for n in found))
            for key, found in parts.items()}


def inspect_gguf(path, revision: str | None, where: str) -> ModelInfo:
    """ModelInfo of a local GGUF file; a ConfigError naming the file and the reason when it is
    unreadable, refused or inconsistent (module doc)."""
    file = locate_gguf(path, where)
    if revision:
        raise ConfigError(f"{where.rsplit('.', 1)[0]}.revision: {file} is a local GGUF file, which "
                          f"has no revisions — remove revision")
    g = read_header(file, where)
    _check_types(g, where)
    config, meta = gguf_config(file, where)
    model = meta_model(config, where, source=file.name)
    info = model_info(config, model, file, file.stat().st_size)
    if meta is None:          # the packed-block loader's: transformers checks it on load
        return dataclasses.replace(info, not_local=_not_local(g))
    _check_tensors(model, g, gguf_sources(model, g, meta), where)
    return info


def _check_tensors(model, g: GgufFile, sources: dict, where: str) -> None:
    """Every parameter of `model` (tied ones once) is made of GGUF tensors with as many
    entries as the config implies."""
    expected = model.state_dict(keep_vars=True)
    groups: dict[int, list[str]] = {}
    for k, t in expected.items():
        groups.setdefault(id(t), []).append(k)
    for keys in groups.values():
        present = [k for k in keys if k in sources]
        if not present:
            raise _bad(where, g.file, f"no tensor for {keys[0]} (a config its metadata implies that "
                       f"its tensors do not match)", "re-convert it")
        for k in present:
            have = sum(math.prod(g.tensors[n].shape) for _, n in sources[k].parts)
            want = math.prod(expected[k].shape)
            if have != want:
                raise _bad(where, g.file, f"{k} has {have} entries in tensor(s) "
                           f"{', '.join(n for _, n in sources[k].parts)}, its metadata implies "
                           f"{list(expected[k].shape)} ({want}): a size mismatch", "re-convert it")


def _check_types(g: GgufFile, where: str) -> None:
    """Every tensor type in the file can be dequantized: the first row of one tensor of each
    type is (the `gguf` package raises NotImplementedError for a type it cannot unpack)."""
    from gguf import dequantize

    seen: dict = {}
    for t in g.tensors.values():
        seen.setdefault(t.qtype, t)
    for qtype, t in seen.items():
        data = g.data(t.name)
        try:
            dequantize(data[:1] if data.ndim > 1 else data, qtype)
        except NotImplementedError:
            raise _bad(where, g.file, f"tensor {t.name} is of type {qtype.name}, which the gguf package "
                       f"cannot dequantize", "convert it with another quantization (F16, Q8_0, "
                       "Q4_K, ...)") from None
        except Exception as e:  # a block shorter than its type's: the tensor table is damaged
            raise _bad(where, g.file, f"tensor {t.name} ({qtype.name}) cannot be read "
                       f"({type(e).__name__}: {_first_line(e)})", "re-download or re-convert it") from None


def _not_local(g: GgufFile) -> str:
    return (f"transformers loads a {g.architecture} GGUF through its packed-block loader, which tdos "
            f"does not read tensor by tensor")


def gguf_tokenizer(file: Path):
    """The tokenizer transformers builds from the GGUF's metadata, or None when it holds none."""
    if "tokenizer.ggml.model" not in read_header(file, "model.path").metadata:
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(file.parent), gguf_file=file.name, local_files_only=True)
    except Exception:  # metadata this transformers cannot build a tokenizer from: as if none
        return None


def _version() -> str:
    import transformers

    return transformers.__version__


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:200] if lines else type(e).__name__
