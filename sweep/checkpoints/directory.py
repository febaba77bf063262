"""A transformers-format checkpoint directory: config.json beside safetensors (sharded or
not) or PyTorch .bin weights, a local directory or a hub snapshot from the Hugging Face cache.

The plan's checks read only headers: each safetensors file's JSON header (a truncated file or
a missing shard is refused in a second, never halfway through a sweep), or a memory-mapped
.bin. A worker reads one tensor at a time by the model's own key, mapped as from_pretrained
maps checkpoint keys (transformers' renamings, the base-model prefix, fused MoE experts built
by its own converter from their parts).
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

from sweep.checkpoints import hub
from sweep.checkpoints.reader import Checkpoint, Source, is_dir, refuse, transformers_version
from sweep.errors import ConfigError, first_line

WEIGHT_SUFFIXES = (".safetensors", ".bin")
_SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2,
                      "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
_MAX_HEADER = 100 << 20      # safetensors caps its JSON header at 100 MB
_LAYER_KEY = re.compile(r"\.(?:layers|h|blocks)\.(\d+)\.")


def locate(path, revision: str | None, where: str, download: bool = False) -> Path:
    """The local directory holding config.json + weights: `path` itself, or the hub snapshot
    (from the HF cache; downloaded only when `download`)."""
    p = Path(str(path)).expanduser()
    if is_dir(p):
        if (p / "config.json").is_file():
            return p
        ggufs = sorted(f.name for f in p.glob("*.gguf") if f.is_file())
        if ggufs:       # the folder a GGUF was downloaded into: the file is the checkpoint
            which = (f"give the file, {p / ggufs[0]}" if len(ggufs) == 1 else
                     f"give one of its {len(ggufs)} files: {', '.join(ggufs)}")
            raise ConfigError(f"{where}: {path} is a folder holding a GGUF file, not a checkpoint "
                              f"directory (no config.json) — {which}")
        raise ConfigError(f"{where}: no checkpoint at {path} (directory has no config.json) — "
                          f"give a checkpoint directory or hub id")
    rev = f" at revision {revision}" if revision else ""
    if hub.looks_like_hub_id(str(path)):
        snap = hub.snapshot(str(path), revision, download, weight_files)
        if snap is not None:
            return snap
    where_not = "not in the Hugging Face cache nor downloadable" if download else "not in the Hugging Face cache"
    raise ConfigError(f"{where}: no checkpoint at {path}{rev} (not a local directory, {where_not}) — "
                      f"download it first or fix the path")


def weight_files(d: Path) -> list[Path]:
    """The weight files transformers would load: every *.safetensors, else every *.bin."""
    files = sorted(f for f in Path(d).iterdir()
                   if f.name.endswith(WEIGHT_SUFFIXES) and not f.name.startswith("training_args"))
    safe = [f for f in files if f.suffix == ".safetensors"]
    return safe or files


class HfDirectory(Checkpoint):
    """A transformers checkpoint directory (module doc); `raw` its config.json."""

    format = "transformers"
    config_files = ("config.json",)

    def __init__(self, path: Path, name: str | None = None, raw: dict | None = None):
        super().__init__(path, name)
        self.raw = raw if raw is not None else json.loads((self.path / "config.json").read_text())
        self._bins: dict[str, dict] = {}

    @staticmethod
    def claims(raw: dict) -> bool:
        return "model_type" in raw

    def config(self, where: str = "model.path", trust_remote_code: bool = False):
        from transformers import AutoConfig
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

        kind = self.raw["model_type"]
        if kind not in CONFIG_MAPPING_NAMES and not trust_remote_code:
            why = "its code ships with the checkpoint (auto_map)" if "auto_map" in self.raw else \
                  "transformers does not know it"
            raise ConfigError(f"{where}: model_type {kind!r} is not in transformers "
                              f"{transformers_version()} ({why}) — set model.trust_remote_code: true "
                              f"to run the checkpoint's own code, or upgrade transformers")
        try:
            config = AutoConfig.from_pretrained(str(self.path), local_files_only=True,
                                                trust_remote_code=trust_remote_code)
        except Exception as e:  # transformers raises many types for inconsistent settings
            raise ConfigError(f"{where}: {self.path / 'config.json'} is inconsistent: "
                              f"{first_line(root_cause(e))} — fix config.json or re-download the "
                              f"checkpoint") from None
        refuse(config, where)
        return config

    def rename(self, key: str) -> str:
        """A stored key as transformers' own layout names it (mamba_ssm's differ)."""
        return key

    # ---- tensors ----------------------------------------------------------------------------
    def names(self, model, where: str = "model.path") -> dict[str, Source]:
        files = weight_files(self.path)
        if not files:
            raise ConfigError(f"{where}: no checkpoint weights (*.safetensors, *.bin) next to "
                              f"{self.path / 'config.json'} — download the weights or fix the path")
        found = {}
        for f in files:
            found.update({self.rename(k): Source(shape, f.name, k)
                          for k, shape in tensor_shapes(f, where).items()})
        return _as_model_keys(model, found, model.state_dict(keep_vars=True))

    def check(self, model, where: str) -> None:
        expected = model.state_dict(keep_vars=True)
        cfg_file = self.path / "config.json"
        _check_depth(model, self.sources, expected, where, cfg_file)
        groups: dict[int, list[str]] = {}
        for k, t in expected.items():
            groups.setdefault(id(t), []).append(k)      # tied weights share one tensor
        for keys in groups.values():
            present = [k for k in keys if k in self.sources]
            if not present:
                raise ConfigError(f"{where}: weights do not match {cfg_file.name}: tensor {keys[0]} is in "
                                  f"no weight file (a missing shard, or another model's config.json?) — "
                                  f"re-download the checkpoint")
            for k in present:
                shape, file = self.sources[k][:2]
                want = tuple(expected[k].shape)
                if shape is not None and shape != want:
                    raise ConfigError(f"{where}: weights do not match {cfg_file.name}: {k} is "
                                      f"{list(shape)} in {file}, config.json implies {list(want)} — "
                                      f"fix config.json or re-download the checkpoint")

    def tensor(self, key: str, rows=None, moved=None):
        if moved is not None:
            raise ValueError(f"{self.name}: a {self.format} checkpoint records no rounding step")
        src = self.sources[key]
        return self.read(src.file, src.key, rows)

    def read(self, file: str, key: str, rows=None):
        """Tensor `key` of weight file `file` as stored; with `rows`, only those rows (a
        safetensors slice, or the pages of a memory-mapped .bin)."""
        import torch

        path = self.path / file
        self.files_read.add(file)
        if path.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(path, "pt") as f:
                if rows is None:
                    t = f.get_tensor(key)
                else:
                    part = f.get_slice(key)
                    t = torch.stack([part[int(r):int(r) + 1][0] for r in rows])
        else:
            if file not in self._bins:
                self._bins[file] = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
            whole = self._bins[file][key]
            t = (whole if rows is None else whole[rows]).clone()
        self.read_bytes += t.numel() * t.element_size()
        return t

    # ---- files ------------------------------------------------------------------------------
    def identity_files(self, tokenizer: bool = False) -> list[Path]:
        files = [self.path / "config.json", *weight_files(self.path)]
        if tokenizer:
            files += [self.path / n for n in hub.TOKENIZER_IDENTITY if (self.path / n).is_file()]
        return files

    @property
    def weight_bytes(self) -> int:
        return sum(f.stat().st_size for f in weight_files(self.path))

    def tokenizer(self):
        return hub.directory_tokenizer(self.path)

    def load(self, dtype, trust_remote_code: bool = False):
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(str(self.path), dtype=dtype, local_files_only=True,
                                                    trust_remote_code=trust_remote_code)


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
                          f"{first_line(e)}) — re-download the checkpoint") from None
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
            raise ConfigError(f"{bad} (header is not JSON: {first_line(e)}) — {fix}") from None
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
    from sweep.checkpoints import hf

    rename = hf.checkpoint_renamer(model)
    out = {}
    for k, source in found.items():
        key, converted = rename(k, expected)
        if converted:
            parts = (out[key].parts if key in out else ()) + ((source.file, k),)
            source = source._replace(shape=None, converted=True, parts=parts)
        out[key] = source
    return out


def root_cause(e: BaseException) -> BaseException:
    """The innermost cause: transformers wraps a config's own check in a validation error
    whose message only names the validator."""
    while e.__cause__ is not None:
        e = e.__cause__
    return e
