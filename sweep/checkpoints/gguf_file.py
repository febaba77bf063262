"""A local GGUF file as a checkpoint (docs/models.md, "GGUF files").

`model.path` may name a `.gguf` file. What the model is comes from transformers' own GGUF
reader (its mapping of the file's metadata onto a config, through the one door hf.py); its
weights are the file's tensors, named as from_pretrained(gguf_file=...) names them,
dequantized by the `gguf` package (gguf_tensors.py: the file's bytes, memory-mapped) and put
back into transformers' layout by transformers' own per-architecture tensor processor.

The plan's checks take seconds and come before any store exists: a file that is not a GGUF,
truncated or corrupt, of an architecture transformers does not read, whose tensors do not
match the config its metadata implies, or holding a tensor type that cannot be dequantized is
a ConfigError naming the file and the reason. The file's identity is its sha256; its tokenizer
is the one in its metadata.

transformers parses the whole metadata, vocabulary included, to build a GGUF's config (seconds
and ~200 MB for a 49k-token vocabulary). The config and the processor's settings are cached in
`$TDOS_CACHE/gguf-config/<sha256>.json` once the plan has built them, so a worker on the same
machine builds its model from the cache and reads none of the vocabulary.
"""
from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path

from sweep.checkpoints.gguf_tensors import read_header, state
from sweep.checkpoints.reader import Checkpoint, Source, refuse, transformers_version
from sweep.errors import ConfigError, first_line

SUFFIX = ".gguf"
_CONFIG_CACHE = "gguf-config"
_CONFIG_VERSION = 1          # of what _build_config corrects: a new one is another cache entry


def claims(path) -> bool:
    """Whether `path` names a GGUF file (by its suffix: it may not exist yet)."""
    return Path(str(path)).suffix.lower() == SUFFIX


def locate(path, where: str) -> Path:
    """The absolute path of the GGUF file `path`; a ConfigError when there is none."""
    p = Path(str(path)).expanduser()
    if not p.is_file():
        why = "a directory" if p.is_dir() else "no such file"
        raise ConfigError(f"{where}: no GGUF file at {path} ({why}) — fix the path")
    return p.resolve()


def _bad(where: str, file: Path, why: str, fix: str) -> ConfigError:
    return ConfigError(f"{where}: {file}: {why} — {fix}")


class GgufCheckpoint(Checkpoint):
    """A GGUF file (module doc): config, weights and tokenizer in one file."""

    format = "gguf"
    config_files = ()                   # the metadata is in the file itself
    no_tokenizer = " (no tokenizer.ggml.model in the GGUF's metadata)"

    def __init__(self, path: Path, name: str | None = None):
        super().__init__(path, name)
        self._processor = self._names = None

    @property
    def config_source(self) -> str:
        return self.path.name

    def config(self, where: str = "model.path", trust_remote_code: bool = False):
        """The config as from_pretrained(gguf_file=...) builds it (gguf_config); every tensor
        type checked to dequantize first."""
        read_header(self.path, where).check_types(where)
        return gguf_config(self.path, where)[0]

    def not_local(self) -> str:
        g = read_header(self.path, "model.path")
        if gguf_config(self.path, "model.path")[1] is None:
            return (f"transformers loads a {g.architecture} GGUF through its packed-block loader, "
                    f"which tdos does not read tensor by tensor")
        return ""

    # ---- tensors ----------------------------------------------------------------------------
    def names(self, model, where: str = "model.path") -> dict[str, Source]:
        """{model key: Source} of the GGUF's tensors, mapped by transformers' own name map;
        `parts` lists every GGUF tensor a key is made of (an MoE's experts fuse several). Empty
        for the packed-block loader's architectures (read whole only)."""
        g = read_header(self.path, where)
        meta = gguf_config(self.path, where)[1]
        if meta is None:
            return {}
        self._processor, self._names = _gguf_names(model, meta, g)
        parts: dict[str, list[str]] = {}
        for name in g.tensors:
            if name in self._names:
                parts.setdefault(self._names[name], []).append(name)
        file = self.path.name
        return {key: Source(None, file, found[0], False, tuple((file, n) for n in found))
                for key, found in parts.items()}

    def check(self, model, where: str) -> None:
        """Every parameter of `model` (tied ones once) is made of GGUF tensors with as many
        entries as the config implies (the packed-block loader checks its own on load)."""
        if not self.sources:
            return
        g = read_header(self.path, where)
        expected = model.state_dict(keep_vars=True)
        groups: dict[int, list[str]] = {}
        for k, t in expected.items():
            groups.setdefault(id(t), []).append(k)
        for keys in groups.values():
            present = [k for k in keys if k in self.sources]
            if not present:
                raise _bad(where, g.file, f"no tensor for {keys[0]} (a config its metadata implies "
                           f"that its tensors do not match)", "re-convert it")
            for k in present:
                parts = self.sources[k].parts
                have = sum(math.prod(g.tensors[n].shape) for _, n in parts)
                want = math.prod(expected[k].shape)
                if have != want:
                    raise _bad(where, g.file, f"{k} has {have} entries in tensor(s) "
                               f"{', '.join(n for _, n in parts)}, its metadata implies "
                               f"{list(expected[k].shape)} ({want}): a size mismatch", "re-convert it")

    def tensor(self, key: str, rows=None, moved=None):
        """The model's tensor `key` in float32 (a moved one in float64); with `rows`, only those
        rows are dequantized (a quantized tensor is stored row by row: (rows, bytes per row))."""
        from sweep.checkpoints import hf

        g = read_header(self.path, "model.path")
        into: dict = {}
        for _, name in self.sources[key].parts:      # several: an MoE's experts, fused
            cut = None if rows is None else rows.numpy()
            self.read_bytes += (g.data(name) if cut is None else g.data(name)[cut]).nbytes
            # a row cut leaves the processors' work unchanged: they act on whole rows of the
            # attention and SSM tensors, never on the embedding's
            hf.gguf_process(self._processor, g.values(name, cut, moved), name, self._names, into)
        self.files_read.add(self.path.name)
        return into[key]

    def rounding(self, where: str):
        return read_header(self.path, where).rounding(where)

    # ---- files ------------------------------------------------------------------------------
    def identity_files(self, tokenizer: bool = False) -> list[Path]:
        return [self.path]              # config, weights and tokenizer in one file

    def file(self, name: str) -> Path:
        return self.path

    @property
    def weight_bytes(self) -> int:
        return self.path.stat().st_size

    def tokenizer(self):
        """The tokenizer transformers builds from the GGUF's metadata, or None when it holds none."""
        if "tokenizer.ggml.model" not in read_header(self.path, "model.path").metadata:
            return None
        from transformers import AutoTokenizer

        try:
            return AutoTokenizer.from_pretrained(str(self.path.parent), gguf_file=self.path.name,
                                                 local_files_only=True)
        except Exception:  # metadata this transformers cannot build a tokenizer from: as if none
            return None

    def load(self, dtype, trust_remote_code: bool = False):
        """Every tensor dequantized to `dtype` by transformers' own GGUF loader, with the config
        tdos plans with (gguf_config)."""
        from transformers import AutoModelForCausalLM

        config = gguf_config(self.path, "model.path")[0]
        return AutoModelForCausalLM.from_pretrained(str(self.path.parent), gguf_file=self.path.name,
                                                    config=config, dtype=dtype, local_files_only=True)


# ---- the config -----------------------------------------------------------------------------
@functools.lru_cache(maxsize=4)
def _metadata(key: tuple) -> dict:
    from sweep.checkpoints import hf

    return hf.gguf_metadata(key[0])


def metadata(file: Path, where: str) -> dict:
    """transformers' parse of the file's whole metadata ({"config", "tokenizer", ...}; not to be
    changed: it is cached)."""
    try:
        return _metadata(state(file))
    except ValueError as e:
        if "not supported" in str(e):
            raise _bad(where, file, f"transformers {transformers_version()} cannot load it "
                       f"({first_line(e)})", "convert the model to a safetensors checkpoint, or use "
                       "an architecture transformers reads from GGUF (docs/models.md)") from None
        raise _bad(where, file, f"unreadable metadata ({first_line(e)})", "re-convert it") from None
    except Exception as e:  # a damaged file fails anywhere in the reader
        raise _bad(where, file, f"unreadable metadata, truncated or corrupt ({type(e).__name__}: "
                   f"{first_line(e)})", "re-download or re-convert it") from None


def gguf_config(file: Path, where: str):
    """(transformers config, processor config) of GGUF `file`: the config as
    from_pretrained(gguf_file=...) builds it, with what that reader leaves out set from the
    file's own metadata (qwen3's head_dim), refused when tdos cannot sweep it; the processor
    config is the dict transformers' tensor processors read (None for the packed-block
    loader's architectures). From the cache when the plan built them before (module doc)."""
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

    from sweep.checkpoints import hf

    packed = hf.gguf_packed_loader(read_header(file, where).architecture)
    meta = None if packed else metadata(file, where)["config"]
    try:
        if packed:
            config = AutoConfig.from_pretrained(str(file.parent), gguf_file=file.name,
                                                local_files_only=True)
        else:       # what AutoConfig.from_pretrained(gguf_file=...) does with the same dict
            config = CONFIG_MAPPING[meta["model_type"]].from_dict(dict(meta))
    except Exception as e:  # transformers raises many types for an inconsistent config
        raise _bad(where, file, f"transformers cannot build its config ({first_line(e)})",
                   "re-convert it") from None
    _own_head_dim(config, read_header(file, where).metadata)
    refuse(config, where)
    return config, meta


def _config_cache(file: Path) -> Path:
    """Where the config of this file's content is cached: keyed by its sha256 and by what
    builds the config from it (transformers' mapping, this module's corrections)."""
    from sweep.checkpoints.hashes import cache_dir, sha256_files

    sha = sha256_files([file], progress=False)[0].sha256
    return cache_dir() / _CONFIG_CACHE / f"{sha}-transformers{transformers_version()}-v{_CONFIG_VERSION}.json"


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


def _own_head_dim(config, metadata: dict) -> None:
    """transformers 5.25 maps no GGUF key onto qwen3's head_dim (its default, 128, stays): the
    file's `<arch>.attention.key_length` says what it is."""
    if config.model_type not in ("qwen3", "qwen3_moe") or not hasattr(config, "head_dim"):
        return
    key = metadata.get(f"{metadata['general.architecture']}.attention.key_length")
    if isinstance(key, int) and key != config.head_dim:
        config.head_dim = key


def _gguf_names(model, meta: dict, g) -> tuple:
    """(transformers' tensor processor of the file's architecture, {GGUF name: model key});
    the map is built once per file state (transformers builds a name map per module: seconds)."""
    from sweep.checkpoints import hf

    processor = hf.gguf_processor(g.architecture, meta)
    key = (state(g.file), type(model).__name__)
    if key not in _NAMES:
        _NAMES.clear()              # one file at a time
        _NAMES[key] = hf.gguf_names(model, processor)
    return processor, _NAMES[key]


_NAMES: dict = {}
