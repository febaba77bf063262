"""Where a layer-local model's weights come from (sweep/generic/local.py): the model built
from config.json (or a GGUF's metadata) with every parameter on the meta device, the
checkpoint's own name for each parameter slot, and the checkpoint's tensors read one by one
by those names: `Checkpoint` for safetensors and .bin files, `GgufCheckpoint` for a GGUF."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch

from sweep.generic import null as nulls
from sweep.generic import quant
from sweep.plan import hf


@contextlib.contextmanager
def parameters_on_meta():
    """Every nn.Parameter registered inside goes to the meta device; buffers stay real."""
    register = torch.nn.Module.register_parameter

    def on_meta(module, name, param):
        if param is not None and param.device.type != "meta":   # a tied one is already there
            param = torch.nn.Parameter(param.to("meta"), requires_grad=False)
        register(module, name, param)

    torch.nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register


class Checkpoint:
    """The checkpoint's tensors read one by one, by the names `checkpoint_names` gives:
    safetensors sharded or not, or a PyTorch .bin memory-mapped (only the pages read)."""

    config_files = ("config.json",)     # read besides the weights: what the model is

    def __init__(self, local: Path, sources: dict):
        self.local = Path(local)
        self.sources = sources                     # {model key: checkpoint.Source}
        self.read_bytes = 0
        self.files_read: set[str] = set()
        self._bins: dict[str, dict] = {}

    def tensor(self, key: str, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The model's tensor `key` as stored; with `rows`, only those rows (int64, 1-D)."""
        src = self.sources[key]
        return self.read(src.file, src.key, rows)

    def read(self, file: str, key: str, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Tensor `key` of weight file `file`; with `rows`, only those rows."""
        path = self.local / file
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


class GgufCheckpoint:
    """A GGUF file's tensors read one by one by the model's key (sweep/plan/gguf_file.py
    gguf_sources): each cut from the file's memory map (only its pages read), dequantized to
    float32 by the `gguf` package as transformers' loader does, and put back into transformers'
    layout by transformers' own processor for the architecture (sweep/plan/hf.py). With
    `member` k, every tensor is member k of the quantization ensemble instead: its weights
    moved within their rounding bins in the file's layout, before the processor
    (sweep/generic/quant.py)."""

    config_files = ()                   # the metadata is in the file itself

    def __init__(self, file: Path, model, meta: dict, member: int | None = None):
        from sweep.plan.gguf_file import gguf_names, gguf_sources, read_header

        self.file = Path(file)
        self._gguf = read_header(self.file, "model.path")
        self._processor, self._names = gguf_names(model, meta, self._gguf)
        self.sources = gguf_sources(model, self._gguf, meta)     # {model key: Source}
        self.read_bytes = 0
        self.files_read: set[str] = set()
        self.member = member

    def tensor(self, key: str, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The model's tensor `key` in float32 (a member's: float64); with `rows`, only those
        rows (int64, 1-D) are dequantized (a quantized tensor is stored row by row: (rows,
        bytes per row))."""
        from gguf import dequantize

        into: dict = {}
        for _, name in self.sources[key].parts:      # several: an MoE's experts, fused
            whole = self._gguf.data(name)
            qtype = self._gguf.tensors[name].qtype
            data = whole if rows is None else whole[rows.numpy()]
            self.read_bytes += data.nbytes
            # a row cut leaves the processors' work unchanged: they act on whole rows of the
            # attention and SSM tensors, never on the embedding's
            w = (dequantize(data, qtype) if self.member is None else
                 quant.perturbed(whole, qtype, self.member, name, None if rows is None else rows.numpy()))
            hf.gguf_process(self._processor, w, name, self._names, into)
        self.files_read.add(self.file.name)
        return into[key]


def apply_member(model, file: Path, member: int) -> None:
    """Every parameter of a whole model loaded from GGUF `file` replaced by member `member`'s
    (the whole-model route, sweep/generic/quant.py), read as the layer-local route reads it;
    tied tensors stay tied (each is written once, in place)."""
    from sweep.plan.gguf_file import gguf_config

    _, meta = gguf_config(Path(file), "model.path")
    if meta is None:
        raise ValueError(f"{file}: transformers loads this architecture through its packed-block "
                         f"loader, whose tensors tdos cannot draw one by one")
    ckpt = GgufCheckpoint(Path(file), model, meta, member)
    with torch.no_grad():
        for key, p in model.named_parameters():
            if key in ckpt.sources:
                p.copy_(ckpt.tensor(key))


def skeleton(local: Path, dtype: torch.dtype, trust_remote_code: bool, device: torch.device,
             member: int | None = None):
    """(model, checkpoint): the model of checkpoint `local` (a directory or a GGUF file) in eval
    mode, every parameter on meta, its buffers built for real on `device`; the reader of its
    tensors by the model's keys (Checkpoint or GgufCheckpoint; `member`: a GGUF's
    quantization-ensemble member k, sweep/generic/quant.py)."""
    from transformers import AutoModelForCausalLM

    from sweep.plan.architecture import hf_config
    from sweep.plan.checkpoint import checkpoint_names
    from sweep.plan.gguf_file import gguf_config, is_gguf

    if is_gguf(local):
        config, meta = gguf_config(Path(local), "model.path")
    else:
        config, rename = hf_config(json.loads((local / "config.json").read_text()), local,
                                   "model.path", trust_remote_code)
    with parameters_on_meta():
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, trust_remote_code=trust_remote_code)
    # computed buffers (rotary tables, embedding scales) as from_pretrained leaves them:
    # built in the compute dtype, then set again by the model's own _init_weights (the
    # weights it also visits are on meta: no work)
    model.eval()
    with torch.no_grad():
        for m in model.modules():
            hf.init_module(model, m)
            for k, b in list(m.named_buffers(recurse=False, remove_duplicate=False)):
                if b.device != device:
                    setattr(m, k, b.to(device))
    if is_gguf(local):
        return model, GgufCheckpoint(local, model, meta, member)
    return model, Checkpoint(local, checkpoint_names(model, local, rename))


def slot_names(model, sources: dict) -> tuple[dict, list[str]]:
    """(names, missing): names maps (id(module), attribute) of every parameter slot to the
    model's key of that parameter the checkpoint holds (`sources`: checkpoint_names); missing
    lists the parameters it holds under no key."""
    # the output embedding is never called (the decoding stops at layer l): it stays on
    # meta, whatever the checkpoint names it
    out = model.get_output_embeddings()
    unused = {id(p) for p in out.parameters()} if out is not None else set()
    unused -= {id(p) for p in model.get_input_embeddings().parameters()}
    # a tied parameter has several keys, and the checkpoint holds one of them
    keys: dict[int, list] = {}
    for path, m in model.named_modules(remove_duplicate=False):
        for k, p in nulls.slots(m):
            keys.setdefault(id(p), []).append(((id(m), k), f"{path}.{k}" if path else k))
    names, missing = {}, []
    for pid, entries in keys.items():
        held = [n for _, n in entries if n in sources]
        missing += [] if held or pid in unused else [entries[0][1]]
        names.update({slot: (held or [entries[0][1]])[0] for slot, _ in entries})
    return names, missing
