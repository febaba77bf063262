"""The reader interface every checkpoint format implements.

A checkpoint is read in the same few ways whatever its format: what the model is (the
transformers config its files describe, refused in one line when tdos cannot sweep it), where
each of the model's tensors is stored (`Source`, by the model's own parameter names), one
tensor read by that name (only the rows asked for, when a worker holds one sequence's
embedding rows), its tokenizer, the files whose content decides a sweep's values, and the
whole model as transformers itself loads it. The plan (sweep/plan/checkpoint.py), the
layer-local worker (sweep/generic/local.py) and the whole-model route (sweep/worker/model.py)
use only this interface; `sweep.checkpoints.formats.open_checkpoint` picks it.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar, NamedTuple

from sweep.errors import ConfigError

# sub-configs that make a config a multimodal wrapper around a text decoder
_MODALITIES = ("vision_config", "audio_config", "speech_config", "vision_tower_config")


class Source(NamedTuple):
    """Where from_pretrained takes one of the model's tensors from (a weight file's tensor,
    or a GGUF's)."""

    shape: tuple[int, ...] | None     # None: a converter builds it (no shape to compare)
    file: str                         # weight file name
    key: str                          # the tensor's name in that file
    converted: bool = False           # built by a converter (fused MoE experts)
    parts: tuple[tuple[str, str], ...] = ()   # converted: every (file, key) the converter reads


class Checkpoint(ABC):
    """One checkpoint's files, read by the reader of their format. `bind(model)` maps the
    model's parameter names to the stored tensors (`sources`); `tensor(key)` then reads one.
    `files_read` and `read_bytes` count what a worker has read (its files are checked
    against the store's record as it first reads them: sweep/worker/resident.py)."""

    format: ClassVar[str] = ""
    config_files: ClassVar[tuple[str, ...]] = ()    # read beside the weights: what the model is

    def __init__(self, path: Path, name: str | None = None):
        self.path = Path(path)          # the directory, or the GGUF file: what workers load
        self.name = name or str(path)   # how messages call it (model.path as written)
        self.sources: dict[str, Source] = {}
        self.files_read: set[str] = set()
        self.read_bytes = 0

    # ---- what the model is ------------------------------------------------------------------
    @property
    def config_source(self) -> str:
        """The file its config is read from (messages name it)."""
        return "config.json"

    @abstractmethod
    def config(self, where: str = "model.path", trust_remote_code: bool = False):
        """The transformers config of the model, refused (ConfigError) when tdos cannot sweep it."""

    def vocab_size(self, config) -> int:
        """Token ids random inputs are drawn below: the config's vocabulary."""
        return config.get_text_config().vocab_size

    def not_local(self) -> str:
        """Why this format makes a worker load the whole model (empty: one layer can be held)."""
        return ""

    # ---- its tensors ------------------------------------------------------------------------
    @abstractmethod
    def names(self, model, where: str = "model.path") -> dict[str, Source]:
        """{the model's parameter key: its Source}, mapped as from_pretrained maps them."""

    def bind(self, model, where: str = "model.path") -> dict[str, Source]:
        """`sources` for `model` (built from `config()`), kept for `tensor`."""
        self.sources = self.names(model, where)
        return self.sources

    @abstractmethod
    def check(self, model, where: str) -> None:
        """A ConfigError naming the file unless every parameter of `model` (tied ones once) is
        stored, with the size its config implies (after `bind`)."""

    @abstractmethod
    def tensor(self, key: str, rows=None, moved=None):
        """The model's tensor `key` (a torch tensor, in transformers' layout); with `rows` (int64,
        1-D), only those rows. `moved(name, shape, rows) -> u in [-1/2, 1/2)` moves every stored
        weight by u times its rounding gap (a quantization-ensemble member): only a reader of a
        rounded format takes it (`rounding`)."""

    def read(self, file: str, key: str):
        """Tensor `key` of stored file `file` as stored: the parts a converter fuses."""
        raise NotImplementedError(f"{self.format} checkpoints fuse no tensors on load")

    def rounding(self, where: str) -> tuple[dict[str, int], dict[str, int]] | None:
        """A format that records how its weights were rounded: ({stored type: how many} of the
        tensors rounded to a known step, {type: how many} of those stored exactly), a
        ConfigError for a type whose step tdos does not know; None: no rounding recorded."""
        return None

    # ---- its files --------------------------------------------------------------------------
    @abstractmethod
    def identity_files(self, tokenizer: bool = False) -> list[Path]:
        """The files whose content decides a sweep's values (and the tokenizer's, with
        `tokenizer`)."""

    def file(self, name: str) -> Path:
        """The checkpoint's file `name` (as the store records it)."""
        return self.path / name

    @property
    @abstractmethod
    def weight_bytes(self) -> int:
        """Bytes of the stored weights."""

    @abstractmethod
    def tokenizer(self):
        """The tokenizer the checkpoint ships, or None."""

    no_tokenizer: ClassVar[str] = ""    # where a message says it looked when it ships none

    @abstractmethod
    def load(self, dtype, trust_remote_code: bool = False):
        """The whole model as transformers loads it, in `dtype` (the whole-model route)."""


def refuse(config, where: str) -> None:
    """A ConfigError when tdos cannot sweep the model `config` describes: encoder–decoder,
    multimodal wrappers, and anything AutoModelForCausalLM has no class for."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    kind = config.model_type
    if getattr(config, "is_encoder_decoder", False):
        raise ConfigError(f"{where}: {kind} is an encoder–decoder model — tdos sweeps decoder-only "
                          f"causal LMs (its decoder sees the encoder's whole input)")
    if any(getattr(config, name, None) is not None for name in _MODALITIES):
        raise ConfigError(f"{where}: {kind} is a multimodal wrapper around a text decoder — save "
                          f"its text model alone (its text_config, e.g. gemma3 -> gemma3_text) as a "
                          f"checkpoint and sweep that")
    if kind not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and not getattr(config, "auto_map", None):
        raise ConfigError(f"{where}: {kind} is not a causal LM (AutoModelForCausalLM has no class "
                          f"for it; encoder-only models attend both ways) — use a decoder-only model")


def transformers_version() -> str:
    import transformers

    return transformers.__version__


def is_dir(p: Path) -> bool:
    """Whether `p` is a directory; a NUL byte or a name too long is simply not one."""
    try:
        return p.is_dir()
    except (OSError, ValueError):
        return False
