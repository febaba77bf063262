"""Load a checkpoint (HF hub id, HF-format directory, or mamba_ssm-format directory).

`load_model` resolves the path to one local directory, builds the transformers model in the
requested dtype, and wraps it in `LoadedModel`: the identity recorded in the store, the
embedding, and the per-layer `BlockOps` that the sweep differentiates.

Weights stay in the narrowest dtype that holds every checkpoint tensor exactly (an fp32
checkpoint swept in fp64 keeps fp32 weights: Mamba-370M is 1.5 GB instead of 3 GB), and
each block is cast to the compute dtype when its `BlockOps` is built. Widening is exact, so
the block math sees bit for bit the weights of a whole-model cast and never meets a stray
lower-precision tensor; only the few blocks in use exist in the compute dtype at once.

mamba_ssm-format directories (state-spaces/mamba-*: config.json with d_model/n_layer/ssm_cfg,
pytorch_model.bin) are mapped onto transformers' MambaConfig/MambaForCausalLM without
needing mamba_ssm installed: the two layouts differ only in `embedding` vs `embeddings`.
"""
from __future__ import annotations

import importlib
import itertools
import json
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from sweep.blocks.base import BlockOps
from sweep.checkpoint import HF_CLASSES, SUPPORTED, find_tokenizer, locate, mamba_ssm_to_hf_config
from sweep.checkpoint import weight_files as _weight_files
from sweep.provenance import sha256_file

# model_type -> BlockOps "module:Class"; the supported
# architectures and everything about locating files live in sweep/checkpoint.py
_OPS = {
    "mamba": "sweep.blocks.mamba:MambaOps",
    "gpt2": "sweep.blocks.gpt2:GPT2Ops",
    "gpt_neox": "sweep.blocks.gpt_neox:GPTNeoXOps",
    "llama": "sweep.blocks.llama:LlamaOps",
}
_ARCHS = {arch: (HF_CLASSES[arch], _OPS[arch]) for arch in SUPPORTED}
_DTYPES = {"float32": torch.float32, "float64": torch.float64}
# BlockOps kept in the compute dtype when it is wider than the stored weights: the swept
# layer and the one being advanced through, never a second copy of the whole model
BLOCK_CACHE = 2


@dataclass
class LoadedModel:
    """A loaded checkpoint: identity, embedding, and per-layer block math."""

    arch: str                      # "mamba" | "gpt2" | "gpt_neox" | "llama"
    n_layers: int
    d_model: int
    max_length: int | None         # n_positions / max_position_embeddings; None for Mamba
    dtype: torch.dtype             # compute dtype: every BlockOps, embedding and J_tt
    vocab_size: int
    identity: dict                 # path, revision, arch, hf config dict, weights sha256
    hf: torch.nn.Module            # the transformers *ForCausalLM / *LMHeadModel, eval mode,
                                   # in the storage dtype (checkpoint precision, <= dtype)
    local_dir: Path
    _blocks: OrderedDict = field(default_factory=OrderedDict, repr=False)
    _tokenizer: object = field(default=False, repr=False)

    @property
    def device(self) -> torch.device:
        return self.hf.get_input_embeddings().weight.device

    @torch.no_grad()
    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """(L,) int64 -> (L, d): input to layer 0 (GPT-2 adds learned positions)."""
        tokens = torch.as_tensor(tokens, dtype=torch.long, device=self.device)
        if self.max_length is not None and tokens.shape[0] > self.max_length:
            raise ValueError(f"{tokens.shape[0]} tokens exceed max_length {self.max_length} of {self.identity['path']}")
        h = self.hf.get_input_embeddings()(tokens).to(self.dtype)      # (L, d)
        if self.arch == "gpt2":
            pos = torch.arange(tokens.shape[0], device=self.device)
            h = h + self.hf.transformer.wpe(pos).to(self.dtype)          # (L, d)
        return h

    @property
    def storage_dtype(self) -> torch.dtype:
        return self.hf.get_input_embeddings().weight.dtype

    def block(self, layer: int) -> BlockOps:
        """BlockOps of layer `layer` (zero-based), constructed as Ops(hf_model, layer).

        When the weights are stored narrower than `dtype`, the Ops is built while the
        layer's tensors are swapped for widened copies (`_widened`) and keeps those; only the
        BLOCK_CACHE most recently used such Ops are kept.
        """
        if not 0 <= layer < self.n_layers:
            raise IndexError(f"layer {layer} out of range: {self.identity['path']} has {self.n_layers} layers")
        if layer not in self._blocks:
            module, cls = _ARCHS[self.arch][1].split(":")
            ops_class = getattr(importlib.import_module(module), cls)
            if self.storage_dtype == self.dtype:
                self._blocks[layer] = ops_class(self.hf, layer)
            else:
                with _widened(_layers(self.hf)[layer], self.dtype):
                    self._blocks[layer] = ops_class(self.hf, layer)
                while len(self._blocks) > BLOCK_CACHE:
                    self._blocks.popitem(last=False)
        self._blocks.move_to_end(layer)
        return self._blocks[layer]

    @torch.no_grad()
    def hidden_states(self, tokens: torch.Tensor, layer: int) -> torch.Tensor:
        """(L,) int64 -> (L, d): the residual stream entering `layer` (0 <= layer <= n_layers)."""
        if not 0 <= layer <= self.n_layers:
            raise IndexError(f"layer {layer} out of range 0..{self.n_layers}")
        h = self.embed(tokens)
        for i in range(layer):
            h = self.block(i).forward(h)
        return h

    def tokenizer(self):
        """The checkpoint's HF tokenizer when its files are available locally, else None."""
        if self._tokenizer is False:
            self._tokenizer = find_tokenizer(self.local_dir)
        return self._tokenizer


def load_model(path, dtype="float32", revision=None, device="cpu") -> LoadedModel:
    """Load a hub id / HF-format dir / mamba_ssm-format dir for computing in `dtype`.

    The weights are held in `storage_dtype(checkpoint, dtype)`; blocks are widened to
    `dtype` as they are used (see the module docstring).
    """
    tdtype = _parse_dtype(dtype)
    local = locate(str(path), revision, where="load_model", download=True)
    cfg = json.loads((local / "config.json").read_text())
    storage = storage_dtype(checkpoint_dtypes(local), tdtype)
    if "model_type" in cfg:
        hf = _load_hf(local, cfg["model_type"], storage)
    elif "d_model" in cfg and "n_layer" in cfg:
        hf = _load_mamba_ssm(local, cfg, storage)
    else:
        raise ValueError(f"{local / 'config.json'}: neither an HF config (model_type) nor mamba_ssm (d_model, n_layer)")
    hf = hf.to(device=device).eval()
    hf.requires_grad_(False)
    return _wrap(hf, str(path), revision, local, tdtype)


_SAFETENSORS_DTYPES = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}


def checkpoint_dtypes(local: Path) -> set:
    """Floating dtypes of the checkpoint's weight tensors, read without loading the weights
    (safetensors headers; .bin files memory-mapped)."""
    found = set()
    for f in _weight_files(local):
        if f.suffix == ".safetensors":
            with open(f, "rb") as fh:
                header = json.loads(fh.read(int.from_bytes(fh.read(8), "little")))
            found |= {_SAFETENSORS_DTYPES[v["dtype"]] for k, v in header.items()
                      if k != "__metadata__" and v["dtype"] in _SAFETENSORS_DTYPES}
        else:
            try:
                sd = torch.load(f, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError:    # legacy (non-zip) format cannot be mapped
                sd = torch.load(f, map_location="cpu", weights_only=True)
            found |= {v.dtype for v in sd.values() if v.is_floating_point()}
            del sd
    return found


def storage_dtype(found: set, compute: torch.dtype) -> torch.dtype:
    """The narrowest dtype holding every dtype in `found` exactly, capped at `compute`.

    fp16 and bf16 hold neither each other, so together they need fp32; a checkpoint wider
    than the compute dtype (fp64 weights swept in fp32) is rounded once, to `compute`.
    """
    bits = {torch.float16: 16, torch.bfloat16: 16, torch.float32: 32, torch.float64: 64}
    if not found:
        return compute
    widest = max(found, key=bits.__getitem__)
    if {torch.float16, torch.bfloat16} <= found and bits[widest] == 16:
        widest = torch.float32
    return widest if bits[widest] <= bits[compute] else compute


@contextmanager
def _widened(module: torch.nn.Module, dtype: torch.dtype):
    """Swap the module's floating parameters and buffers for copies in `dtype` (exact when
    widening), then put the stored tensors back untouched: memory-mapped weights stay mapped
    and are never re-copied on the way back."""
    saved = []
    for t in itertools.chain(module.parameters(), module.buffers()):
        if t.is_floating_point() and t.dtype != dtype:
            saved.append((t, t.data))
            t.data = t.data.to(dtype)
    try:
        yield module
    finally:
        for t, data in saved:
            t.data = data


def _layers(hf) -> torch.nn.ModuleList:
    """The residual blocks of a supported transformers model."""
    base = getattr(hf, "base_model", hf)
    for name in ("layers", "h"):
        if hasattr(base, name):
            return getattr(base, name)
    raise AttributeError(f"{type(hf).__name__}: no layers / h block list")


def _wrap(hf, path: str, revision, local: Path, dtype: torch.dtype) -> LoadedModel:
    c = hf.config
    arch = c.model_type
    max_len = None if arch == "mamba" else getattr(c, "n_positions", None) or c.max_position_embeddings
    identity = {
        "path": path,
        "revision": revision,
        "arch": arch,
        "config": json.loads(c.to_json_string(use_diff=False)),
        "weights_sha256": _weights_sha256(local),
    }
    return LoadedModel(
        arch=arch, n_layers=c.num_hidden_layers, d_model=c.hidden_size, max_length=max_len,
        dtype=dtype, vocab_size=c.vocab_size, identity=identity, hf=hf, local_dir=local,
    )


def _parse_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype) and dtype in _DTYPES.values():
        return dtype
    if dtype in _DTYPES:
        return _DTYPES[dtype]
    raise ValueError(f"dtype {dtype!r} not supported; use one of {sorted(_DTYPES)}")


def _weights_sha256(d: Path) -> dict:
    """{file name: sha256} of the weight files that were loaded."""
    return {f.name: sha256_file(f) for f in _weight_files(d)}


# ---------------------------------------------------------------- HF format

def _load_hf(local: Path, model_type: str, dtype: torch.dtype):
    if model_type not in _ARCHS:
        raise ValueError(f"unsupported model_type {model_type!r} in {local}; supported: {', '.join(SUPPORTED)}")
    import transformers

    cls = getattr(transformers, _ARCHS[model_type][0])
    # the sweep never runs HF's attention (the BlockOps compute their own), so this choice
    # changes no stored number; eager loads on any transformers build without extra kernels
    kw = {} if model_type == "mamba" else {"attn_implementation": "eager"}
    # workers load models mid-sweep: transformers' per-load bar would break the sweep's own
    transformers.utils.logging.disable_progress_bar()
    return cls.from_pretrained(str(local), dtype=dtype, local_files_only=True, **kw)


# ---------------------------------------------------------------- mamba_ssm format

def _read_state_dict(local: Path) -> dict:
    files = _weight_files(local)
    if not files:
        raise FileNotFoundError(f"no checkpoint weights in {local}: looked for *.safetensors, pytorch_model.bin")
    sd = {}
    for f in files:
        if f.suffix == ".safetensors":
            from safetensors.torch import load_file

            sd.update(load_file(str(f)))
        else:
            sd.update(torch.load(f, map_location="cpu", weights_only=True))
    return sd


def _load_mamba_ssm(local: Path, cfg: dict, dtype: torch.dtype):
    from transformers import MambaForCausalLM

    config = mamba_ssm_to_hf_config(cfg)
    sd = {k.replace("backbone.embedding.", "backbone.embeddings."): v.to(dtype) if v.is_floating_point() else v
          for k, v in _read_state_dict(local).items()}
    if config.tie_word_embeddings or "lm_head.weight" not in sd:
        sd["lm_head.weight"] = sd["backbone.embeddings.weight"]
    with torch.device("meta"):
        model = MambaForCausalLM(config)
    missing, unexpected = model.load_state_dict(sd, strict=False, assign=True)
    if missing or unexpected:
        raise ValueError(f"{local}: mamba_ssm weights do not match the config: missing {missing}, unexpected {unexpected}")
    return model
