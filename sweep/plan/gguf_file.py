"""A local GGUF file as a checkpoint (docs/models.md, "GGUF files").

`model.path` may name a `.gguf` file. What the model is comes from transformers' own GGUF
reader (its mapping of the file's metadata onto a config, sweep/plan/hf.py); its weights are
the file's tensors, named as from_pretrained(gguf_file=...) names them, dequantized by the
`gguf` package and put back into transformers' layout by transformers' own per-architecture
tensor processor. Nothing here reads a tensor's values except one row of each tensor type
(can it be dequantized at all?).

`inspect_gguf` is the plan's check, in a second and before any store exists: a file that is
not a GGUF, truncated or corrupt, of an architecture transformers does not read, whose tensors
do not match the config its metadata implies, or holding a tensor type that cannot be
dequantized is a ConfigError naming the file and the reason. `gguf_sources` gives every model
key the GGUF tensor(s) it is made of: the layer-local reader (sweep/generic/weights.py) reads
a layer's tensors by them. The file's identity is its sha256 (sweep/plan/provenance.py); its
tokenizer is the one in its metadata.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
from pathlib import Path

from sweep.errors import ConfigError
from sweep.plan.architecture import ModelInfo, Source, meta_model, model_info, refuse

SUFFIX = ".gguf"


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


def _state(file: Path) -> tuple:
    """What changes whenever the file is rewritten (the key of the caches below)."""
    s = os.stat(file)
    return (str(file), s.st_size, s.st_mtime_ns, s.st_ctime_ns, s.st_ino)


@functools.lru_cache(maxsize=4)
def _reader(state: tuple):
    # parsing a 49k-token vocabulary's metadata takes seconds: once per file state
    from gguf import GGUFReader

    return GGUFReader(state[0])


@functools.lru_cache(maxsize=4)
def _metadata(state: tuple) -> dict:
    from sweep.plan import hf

    return hf.gguf_metadata(state[0])


def read_header(file: Path, where: str):
    """The file's `gguf.GGUFReader` (memory-mapped: no tensor is read); a truncated or corrupt
    file is a ConfigError."""
    try:
        return _reader(_state(file))
    except Exception as e:  # gguf raises ValueError, IndexError, struct errors for damaged files
        raise _bad(where, file, f"not a readable GGUF file, truncated or corrupt ({type(e).__name__}: "
                   f"{_first_line(e)})", "re-download or re-convert it") from None


def metadata(file: Path, where: str) -> dict:
    """transformers' parse of the file's metadata ({"config", "tokenizer", ...}; not to be
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
    processors read (None for the packed-block loader's architectures)."""
    from transformers import CONFIG_MAPPING, AutoConfig

    from sweep.plan import hf

    packed = hf.gguf_packed_loader(gguf_architecture(file))
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
    _own_head_dim(config, file)
    refuse(config, where)
    return config, meta


def _own_head_dim(config, file: Path) -> None:
    """transformers 5.25 maps no GGUF key onto qwen3's head_dim (its default, 128, stays): the
    file's `<arch>.attention.key_length` says what it is."""
    if config.model_type not in ("qwen3", "qwen3_moe") or not hasattr(config, "head_dim"):
        return
    reader = _reader_quiet(file)
    arch = _field(reader, "general.architecture")
    key = _field(reader, f"{arch}.attention.key_length")
    if isinstance(key, int) and key != config.head_dim:
        config.head_dim = key


def _reader_quiet(file: Path):
    """The file's reader, already known readable (read_header ran first in the plan)."""
    return _reader(_state(file))


def _field(reader, key: str):
    """The scalar or string value of metadata field `key`, or None."""
    f = reader.fields.get(key)
    if f is None or not f.data:
        return None
    v = f.parts[f.data[0]]
    if f.types and f.types[0].name == "STRING":
        return bytes(v).decode("utf-8", "replace")
    return v.tolist()[0] if hasattr(v, "tolist") and len(v) == 1 else None


def gguf_architecture(file: Path) -> str:
    """The file's `general.architecture` (llama.cpp's name, the key of transformers' processors)."""
    return _field(_reader_quiet(file), "general.architecture")


def gguf_names(model, meta: dict, file: Path) -> tuple:
    """(transformers' tensor processor of the file's architecture, {GGUF name: model key});
    the map is built once per file state (transformers builds a name map per module: seconds)."""
    from sweep.plan import hf

    processor = hf.gguf_processor(gguf_architecture(file), meta)
    return processor, _names(_state(file), model, processor)


def _names(state: tuple, model, processor) -> dict:
    key = (state, type(model).__name__)
    if key not in _NAMES:
        from sweep.plan import hf

        _NAMES.clear()              # one file at a time
        _NAMES[key] = hf.gguf_names(model, processor)
    return _NAMES[key]


_NAMES: dict = {}


def gguf_sources(model, reader, meta: dict, file: Path) -> dict:
    """{model key: checkpoint.Source} of the GGUF's tensors, mapped by transformers' own name map;
    `parts` lists every GGUF tensor a key is made of (an MoE's experts fuse several)."""
    _, names = gguf_names(model, meta, file)
    parts: dict[str, list[str]] = {}
    for t in reader.tensors:
        if t.name in names:
            parts.setdefault(names[t.name], []).append(t.name)
    return {key: Source(None, file.name, found[0], False, tuple((file.name, n) for n in found))
            for key, found in parts.items()}


def inspect_gguf(path, revision: str | None, where: str) -> ModelInfo:
    """ModelInfo of a local GGUF file; a ConfigError naming the file and the reason when it is
    unreadable, refused or inconsistent (module doc)."""
    file = locate_gguf(path, where)
    if revision:
        raise ConfigError(f"{where.rsplit('.', 1)[0]}.revision: {file} is a local GGUF file, which "
                          f"has no revisions — remove revision")
    reader = read_header(file, where)
    config, meta = gguf_config(file, where)
    model = meta_model(config, where, source=file.name)
    info = model_info(config, model, file, file.stat().st_size)
    _check_types(reader, file, where)
    if meta is None:          # the packed-block loader's: transformers checks it on load
        return dataclasses.replace(info, not_local=_not_local(file))
    _check_tensors(model, reader, gguf_sources(model, reader, meta, file), file, where)
    return info


def _check_tensors(model, reader, sources: dict, file: Path, where: str) -> None:
    """Every parameter of `model` (tied ones once, the output head of a tied model aside) is
    made of GGUF tensors with as many entries as the config implies."""
    sizes = {t.name: int(t.n_elements) for t in reader.tensors}
    expected = model.state_dict(keep_vars=True)
    groups: dict[int, list[str]] = {}
    for k, t in expected.items():
        groups.setdefault(id(t), []).append(k)
    for keys in groups.values():
        present = [k for k in keys if k in sources]
        if not present:
            raise _bad(where, file, f"no tensor for {keys[0]} (a config its metadata implies that "
                       f"its tensors do not match)", "re-convert it")
        for k in present:
            have = sum(sizes[n] for _, n in sources[k].parts)
            want = math.prod(expected[k].shape)
            if have != want:
                raise _bad(where, file, f"{k} has {have} entries in tensor(s) "
                           f"{', '.join(n for _, n in sources[k].parts)}, its metadata implies "
                           f"{list(expected[k].shape)} ({want}): a size mismatch", "re-convert it")


def _check_types(reader, file: Path, where: str) -> None:
    """Every tensor type in the file can be dequantized: the first row of one tensor of each
    type is (the `gguf` package raises NotImplementedError for a type it cannot unpack)."""
    from gguf import dequantize

    seen = {}
    for t in reader.tensors:
        seen.setdefault(t.tensor_type, t)
    for qtype, t in seen.items():
        row = t.data[:1] if t.data.ndim > 1 else t.data
        try:
            dequantize(row, qtype)
        except NotImplementedError:
            raise _bad(where, file, f"tensor {t.name} is of type {qtype.name}, which the gguf package "
                       f"cannot dequantize", "convert it with another quantization (F16, Q8_0, "
                       "Q4_K, ...)") from None
        except Exception as e:  # a block shorter than its type's: the tensor table is damaged
            raise _bad(where, file, f"tensor {t.name} ({qtype.name}) cannot be read "
                       f"({type(e).__name__}: {_first_line(e)})", "re-download or re-convert it") from None


def _not_local(file: Path) -> str:
    from sweep.plan import hf

    arch = gguf_architecture(file)
    if hf.gguf_packed_loader(arch):
        return (f"transformers loads a {arch} GGUF through its packed-block loader, which tdos does "
                f"not read tensor by tensor")
    return ""


def has_tokenizer(file: Path) -> bool:
    """Whether the GGUF's metadata holds a tokenizer (`tokenizer.ggml.model`)."""
    return "tokenizer.ggml.model" in _reader_quiet(file).fields


def gguf_tokenizer(file: Path):
    """The tokenizer transformers builds from the GGUF's metadata, or None when it holds none."""
    if not has_tokenizer(file):
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
