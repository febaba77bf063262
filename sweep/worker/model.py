"""Load a checkpoint on a worker: the transformers model the plan described, ready to sweep.

`load_local` builds the model from one local checkpoint directory or GGUF file (a sweep
worker passes the one the plan resolved, ModelRef.location, and never resolves a config path
itself): as its reader loads it whole (sweep/checkpoints/: `AutoModelForCausalLM` in the
compute dtype; mamba_ssm-format directories mapped onto transformers' Mamba), its attention switched to tdos' registered function
(sweep/generic/attention.py) and, in float64, its expert matmuls to transformers' eager
implementation (the grouped kernels have no float64). Nothing is downcast: a model that
cannot run in the requested dtype fails to load. `load_model` (scripts, tests, benchmarks)
first resolves a path or hub id to that directory.

`LoadedModel.jacobians(layer)` is the generic exact path of that layer; `block(layer)` the
hand-written fast path where one is kept (sweep/blocks/__init__.py FAST).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from sweep.blocks import FAST
from sweep.blocks.base import BlockOps
from sweep.checkpoints.formats import open_checkpoint
from sweep.checkpoints.hashes import sha256_files
from sweep.generic import attention
from sweep.numerics.dtypes import torch_dtype
from sweep.plan.layers import LayerKind, decoder_layers, layer_kinds

# hand-written blocks kept per model: the swept layer and the one being advanced through
# (MambaOps folds a copy of in_proj on first use)
BLOCK_CACHE = 2


@dataclass
class LoadedModel:
    """A loaded checkpoint: identity, embedding, and per-layer Jacobians."""

    arch: str                      # config.json model_type
    n_layers: int
    d_model: int
    dtype: torch.dtype             # compute dtype of the whole model
    vocab_size: int
    identity: dict                 # path, revision, arch, config dict, files' sha256
    hf: torch.nn.Module            # the transformers *ForCausalLM, eval mode, no grad
    local_dir: Path
    kinds: tuple[LayerKind, ...] = ()
    fresh: list = field(default_factory=list, repr=False)   # module-held state right after loading
    _engines: dict = field(default_factory=dict, repr=False)
    _blocks: dict = field(default_factory=dict, repr=False)
    _tokenizer: object = field(default=False, repr=False)

    @property
    def device(self) -> torch.device:
        return self.hf.get_input_embeddings().weight.device

    @property
    def fast(self) -> bool:
        """Whether a hand-written block exists for this architecture."""
        return self.arch in FAST

    def jacobians(self, layer: int):
        """The generic path of `layer` (sweep.generic.decode.LayerJacobians), kept per layer."""
        from sweep.generic.decode import LayerJacobians

        self._check(layer)
        if layer not in self._engines:
            self._engines[layer] = LayerJacobians(self.hf, layer, fresh=self.fresh)
        return self._engines[layer]

    def token_jacobian(self, layer: int, ids: torch.Tensor, t: int, engine: str) -> torch.Tensor:
        """(d, d) J_tt of token t of `ids` (n,) > t with the prefix [0, t) held fixed, by the
        generic path or (engine "fast") the hand-written one: what the self-check holds to
        autograd of the unmodified layer."""
        if engine == "fast":
            h = self.hidden_states(ids[: t + 1], layer)                  # (t + 1, d)
            return self.block(layer).jacobians(h, t, t + 1)[0]
        return self.jacobians(layer).run(ids[: t + 1], t, t + 1).jac[0]

    def block(self, layer: int) -> BlockOps:
        """The hand-written BlockOps of `layer` (architectures in FAST only)."""
        self._check(layer)
        if layer not in self._blocks:
            self._blocks[layer] = FAST[self.arch](self.hf, layer)
            while len(self._blocks) > BLOCK_CACHE:
                self._blocks.pop(next(iter(self._blocks)))
        self._blocks[layer] = self._blocks.pop(layer)            # most recently used last
        return self._blocks[layer]

    @torch.no_grad()
    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """(L,) int64 -> (L, d): the input of layer 0 for the fast paths (GPT-2 adds learned
        positions)."""
        tokens = torch.as_tensor(tokens, dtype=torch.long, device=self.device)
        h = self.hf.get_input_embeddings()(tokens)                      # (L, d)
        if self.arch == "gpt2":
            h = h + self.hf.transformer.wpe(torch.arange(tokens.shape[0], device=self.device))
        return h

    @torch.no_grad()
    def hidden_states(self, tokens: torch.Tensor, layer: int) -> torch.Tensor:
        """(L,) int64 -> (L, d): the stream entering `layer` by the hand-written blocks'
        forward (architectures in FAST; the generic path reads it off the model's decoding)."""
        if not 0 <= layer <= self.n_layers:
            raise IndexError(f"layer {layer} out of range 0..{self.n_layers}")
        h = self.embed(tokens)
        for i in range(layer):
            h = self.block(i).forward(h)
        return h

    def a_log(self, layer: int) -> torch.Tensor | None:
        """A_log of a layer with a decay: (d_inner, d_state) Mamba-1, (heads,) Mamba-2 and
        the gated delta rule."""
        from sweep.plan.layers import a_log

        return a_log(decoder_layers(self.hf)[layer]) if self.kinds[layer].ssm else None

    def tokenizer(self):
        """The checkpoint's HF tokenizer when its files are available locally, else None."""
        if self._tokenizer is False:
            self._tokenizer = open_checkpoint(self.local_dir).tokenizer()
        return self._tokenizer

    def _check(self, layer: int) -> None:
        if not 0 <= layer < self.n_layers:
            raise IndexError(f"layer {layer} out of range: {self.identity['path']} has "
                             f"{self.n_layers} layers")


def load_model(path, dtype="float32", revision=None, device="cpu",
               trust_remote_code: bool = False) -> LoadedModel:
    """Load a hub id / HF-format dir / mamba_ssm-format dir / GGUF file for computing in `dtype`."""
    local = open_checkpoint(str(path), revision, where="load_model", download=True).path
    return load_local(local, dtype, device, trust_remote_code, name=str(path), revision=revision)


def load_local(local: Path, dtype="float32", device="cpu", trust_remote_code: bool = False,
               name: str | None = None, revision=None) -> LoadedModel:
    """Load the checkpoint at `local` (the plan's resolved location: a worker resolves no path
    of the config again) as its reader loads it whole; `name` is how messages call it (the
    config's model.path)."""
    tdtype = torch_dtype(dtype)
    ckpt = open_checkpoint(Path(local))
    quiet_transformers()
    hf = ckpt.load(tdtype, trust_remote_code)
    return _ready(hf, tdtype, device, name or str(local), revision, ckpt)


def _ready(hf, dtype: torch.dtype, device, name: str, revision, ckpt) -> LoadedModel:
    hf = hf.to(device=device).eval()
    hf.requires_grad_(False)
    prepare(hf, dtype)
    return _wrap(hf, name, revision, ckpt, dtype)


def prepare(hf, dtype: torch.dtype) -> None:
    """What every route sets on a built model: tdos' attention function, and in float64 the
    eager expert matmuls (the grouped expert kernels lack float64)."""
    _use_tdos_attention(hf)
    if dtype == torch.float64 and hf.get_experts_implementation().get(""):
        hf.set_experts_implementation("eager")


def _use_tdos_attention(hf) -> None:
    """Route every attention layer through tdos' registered function; a model that takes no
    custom attention keeps its own (the generic path then concatenates its prefix)."""
    attention.register()
    try:
        hf.set_attn_implementation(attention.NAME)
    except (ValueError, AttributeError):
        pass


def quiet_transformers() -> None:
    """Workers load models mid-sweep: transformers' per-load bar would break the sweep's own,
    and its "falling back to the reference PyTorch implementation" notes are expected here."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.get_logger("transformers.integrations.hub_kernels").setLevel("ERROR")


def _wrap(hf, path: str, revision, ckpt, dtype: torch.dtype) -> LoadedModel:
    c = hf.config.get_text_config()
    identity = {
        "path": path,
        "revision": revision,
        "arch": hf.config.model_type,
        "config": json.loads(hf.config.to_json_string(use_diff=False)),
        # the tokenizer's files too: a store of a text sweep records them (sweep.plan.make)
        "files_sha256": {h.path.name: h.sha256 for h in
                         sha256_files(ckpt.identity_files(tokenizer=True), progress=False)},
    }
    from sweep.generic.prefix import module_state

    return LoadedModel(arch=hf.config.model_type, n_layers=c.num_hidden_layers,
                       d_model=c.hidden_size, dtype=dtype, vocab_size=c.vocab_size,
                       identity=identity, hf=hf, local_dir=ckpt.path, kinds=layer_kinds(hf),
                       fresh=module_state(hf))
