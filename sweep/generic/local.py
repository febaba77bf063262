"""One decoder layer resident: a model whose only materialised weights are layer l's.

`LocalModel(local, dtype)` builds the model skeleton from its checkpoint's config with every
parameter on the meta device (buffers such as rotary frequencies are built for real: they are
computed, not stored) and reads weights one tensor at a time through the checkpoint's reader
(sweep/checkpoints/), under the names `from_pretrained` gives them (the skeleton:
sweep/generic/weights.py):

- `resident(layer)` materialises decoder layer `layer` (the oldest held one goes back to
  meta beyond `keep`) plus, once, the small model-level modules the layers' call needs
  (norms, position tables, ...); tensors transformers builds from several (fused MoE experts)
  go through its own loader for that layer only;
- the input embedding holds only the rows of the tokens of the current sequence
  (`sequence(ids)`), indexed through a pre-hook that maps token ids to those rows, so its
  own forward (scaling included) runs unchanged;
- decoder layers before `layer` are stand-ins (sweep/generic/standin.py) that keep the
  cache's lengths as their own call would (a placeholder key and value of one channel), carry
  the real layer's attributes, and pass the hidden state on in the form layer `layer` itself
  returns, probed once per layer; nothing after `layer` is ever called (the decoding stops
  right after it);
- the hidden-state input of `layer` is replaced by the stored residual h_l at the positions
  of the current forward (`at(start, n)`): whatever reached it through the stand-ins is
  discarded;
- `embedded(ids)` and `step(ids, h, j)` give h_0 and h_{j+1}: the residual stream, one layer
  resident at a time.

A weight variant (`variant=`: a null or an ensemble member, docs/nulls.md) makes its tensors
by its kind's registered maker (sweep/checkpoints/makers.py) from what it reads, or without
reading (random_init's own init per module); its embedding rows are those rows of its whole
embedding, made per sequence, unless the kind makes rows alone (`Maker.rowwise`).

Every model-level computation (masks, positions, rotary tables, a hybrid's embeddings passed
to its layers) is transformers' own. A model that cannot be held this way (a parameter the
checkpoint does not give, an RWKV that rescales its weights on its first forward) raises
`NotLocal`; the caller falls back to the whole model and says so.
"""
from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from sweep.checkpoints import hf, kinds
from sweep.checkpoints.makers import parameter_names, post_order, slots
from sweep.generic import prefix, standin, weights
from sweep.generic.decode import first_output, split_hidden
from sweep.plan.architecture import rescales_on_first_forward
from sweep.plan.layers import decoder_layers


class NotLocal(Exception):
    """The layer cannot be loaded alone (names differ from the checkpoint's, or a format)."""


class LocalModel:
    """The model of checkpoint `local` with at most `keep` decoder layers materialised (see
    the module doc)."""

    def __init__(self, local: Path, dtype: torch.dtype, trust_remote_code: bool = False, keep: int = 1,
                 device: str | torch.device = "cpu", variant=None):
        self.dtype, self.keep, self.device = dtype, max(1, keep), torch.device(device)
        self.variant = variant          # sweep.format.variants.Variant (None: the trained weights)
        self.maker = kinds.maker(variant)
        model, self.ckpt = weights.skeleton(Path(local), dtype, trust_remote_code, self.device)
        self.model = model
        self.fresh = prefix.module_state(model)     # module-held decode state, as built
        self.layers = decoder_layers(model)
        self.n_layers = len(self.layers)
        self.maker.bind(model, list(self.layers))
        sources = self.ckpt.sources
        # (module, attribute) -> the checkpoint's key of that parameter
        self._names, missing = weights.slot_names(model, sources)
        if missing:
            raise NotLocal(f"{sorted(missing)[0]} is not a tensor of the checkpoint (transformers "
                           f"renames or fuses {len(missing)} tensor(s) on load)")
        self.embedding = model.get_input_embeddings()
        self._padding_idx = self.embedding.padding_idx      # what a random_init null's init zeroes
        self._embedding_shape = tuple(self.embedding.weight.shape)   # (vocab, d)
        # each module's path and its rank in the order transformers initialises them, read
        # from the whole tree before stand-ins replace any layer in it
        self._paths: dict[int, str] = {}
        for path, m in post_order(model):
            self._paths.setdefault(id(m), path)
        self._rank = {mid: i for i, mid in enumerate(self._paths)}
        self._tensor_names = parameter_names(model)
        # it will hold a sequence's rows only: a padding row index means nothing there (and
        # only ever zeroes a gradient)
        self.embedding.padding_idx = None
        for m in model.modules():
            if hasattr(m, "layers_are_rescaled"):
                if rescales_on_first_forward(model.config):
                    raise NotLocal("RWKV rescales its layers' weights in place on its first forward "
                                   "(rescale_every below its depth)")
                m.layers_are_rescaled = not m.training   # as its first forward leaves it
        self._real = list(self.layers)
        self.layer: int | None = None
        self._held: list[int] = []                         # materialised layers, oldest first
        self.forwards = 0                                  # decoder-layer calls by step()
        self.loads = 0                                     # decoder layers read
        self.unique: torch.Tensor | None = None
        self.residual: torch.Tensor | None = None          # (n, d) h_l of the current sequence
        self._window, self._armed = (0, 0), False
        self._forms: dict[int, standin.Form] = {}          # layer -> its stand-ins' output form
        self._hooks = [self.embedding.register_forward_pre_hook(self._rows)]
        self._load(self._model_level())

    # ---- weights ---------------------------------------------------------------------------
    def _model_level(self):
        """Parameters outside the decoder layers and the embeddings (norms, position tables)."""
        inside = {id(p) for p in self.layers.parameters()}
        out = self.model.get_output_embeddings()
        skip = inside | {id(p) for m in (self.embedding, out) if m is not None for p in m.parameters()}
        return [(m, k) for m in self.model.modules() for k, p in slots(m) if id(p) not in skip]

    def _load(self, held) -> None:
        """The parameters of `held` ((module, attribute), ...) materialised: read from the
        checkpoint and made by the variant's maker, or made by it without reading."""
        if not self.maker.reads:
            self._init(held)
            return
        converted = []
        for module, key in held:
            name = self.maker.source(self._names[id(module), key])   # held by the checkpoint
            if self.ckpt.sources[name].converted:
                converted.append((module, key, name))
                continue
            t = self.maker.read(self.ckpt, name).to(device=self.device, dtype=self.dtype)
            t = self.maker.tensor(self._tensor_names[id(module), key], t)
            if t.shape != getattr(module, key).shape:
                raise NotLocal(f"{name}: {tuple(t.shape)} in the checkpoint, "
                               f"{tuple(getattr(module, key).shape)} in the model")
            setattr(module, key, torch.nn.Parameter(t, requires_grad=False))
        if converted:
            self._convert(converted)

    def _init(self, held) -> None:
        """The parameters of `held` made by a kind that reads nothing (random_init: their
        modules' own init), module by module, children before parents as transformers visits
        them."""
        modules = sorted({id(m): m for m, _ in held}.values(), key=lambda m: self._rank[id(m)])
        order = [(self._paths[id(m)], m) for m in modules]
        self.maker.init(self.model, order, self.dtype, self.device)

    def _convert(self, held) -> None:
        """Parameters transformers builds from several checkpoint tensors (fused MoE experts):
        the tensors they come from, read here, go through transformers' own loader with the
        model's conversion mapping (what from_pretrained runs), for these parameters only."""
        if any(self.maker.source(self._names[id(m), k]) != self._names[id(m), k] for m, k, _ in held):
            raise NotLocal("a variant whose layer reads another layer's tensors, of a model whose "
                           "tensors transformers fuses on load")
        parts = {key for *_, name in held for key in self.ckpt.sources[name].parts}
        state = {key: self.ckpt.read(file, key) for file, key in sorted(parts)}
        for j, real in enumerate(self._real):    # the loader addresses every layer by its name
            self.layers[j] = real
        hf.load_converted(self.model, state, self.dtype, self.device)
        for module, key, name in held:
            p = getattr(module, key)
            if p.device.type == "meta":
                raise NotLocal(f"{name}: transformers' loader did not build it from "
                               f"{len(self.ckpt.sources[name].parts)} checkpoint tensor(s)")
            # the variant's: made from the model's tensor, as the whole route sees it
            p = self.maker.tensor(self._tensor_names[id(module), key], p.detach().to(self.dtype))
            setattr(module, key, torch.nn.Parameter(p, requires_grad=False))

    def resident(self, layer: int) -> None:
        """Decoder layer `layer` materialised (read unless held), and the oldest held one
        back on meta when more than `keep` would be held."""
        if layer == self.layer:
            return
        if layer in self._held:
            self._held.remove(layer)
        else:
            while len(self._held) >= self.keep:
                for m in self._real[self._held.pop(0)].modules():
                    for k, p in slots(m):
                        setattr(m, k, torch.nn.Parameter(p.to("meta"), requires_grad=False))
            self._load([(m, k) for m in self._real[layer].modules() for k, _ in slots(m)])
            self.loads += 1
        self._held.append(layer)
        form = self._forms.get(layer, standin.CANDIDATES[0])
        for j, real in enumerate(self._real):
            self.layers[j] = standin.StandIn(j, real, form) if j < layer else real
        self.layer = layer
        if layer > 0 and layer not in self._forms:
            self._forms[layer] = self._probe_form()
            for j in range(layer):
                self.layers[j]._form = self._forms[layer]

    def _probe_form(self) -> standin.Form:
        """Layer l's own output form for the stand-ins before it (sweep/generic/standin.py),
        probed on one token (the current sequence's first, or token 0 before any)."""
        ids = self.unique[:1] if self.unique is not None else torch.zeros(1, dtype=torch.long)
        saved = (self.unique, self.embedding.weight, self.residual)
        if self.unique is None:
            self.sequence(ids)

        def set_form(form):
            for j in range(self.layer):
                self.layers[j]._form = form

        try:
            return standin.probe(self.model, self.layers, self._real[self.layer], self.layer,
                                 ids[None, :1], set_form)
        except standin.WrongStandIn as e:
            raise NotLocal(f"the stand-ins before layer {self.layer}: {e}") from None
        finally:
            # the probe's cached forward may leave module-held decode state (RecurrentGemma)
            prefix.restore_state(self.fresh)
            self.unique, self.embedding.weight, self.residual = saved

    def stream(self, ids: torch.Tensor, last: int) -> list[torch.Tensor]:
        """[h_0, ..., h_last] of sequence `ids` (1-D), each (n, d): one layer resident at a
        time, each layer's whole-sequence call fed the previous one's output."""
        hs = [self.embedded(ids)]
        for j in range(last):
            hs.append(self.step(ids, hs[-1], j))
        return hs

    def embedded(self, ids: torch.Tensor) -> torch.Tensor:
        """h_0 (n, d) of sequence `ids` (1-D): layer 0's input as the model's forward makes it."""
        self.sequence(ids)
        return self._capture(ids, self.layers[0], output=False)

    def step(self, ids: torch.Tensor, h: torch.Tensor, j: int) -> torch.Tensor:
        """h_{j+1} (n, d) of sequence `ids` (1-D) from h_j (n, d): decoder layer j resident,
        its whole-sequence call fed `h`."""
        self.sequence(ids, h)
        self.resident(j)
        self.at(0, len(ids))
        self.forwards += 1
        return self._capture(ids, self._real[j], output=True)

    def _capture(self, ids: torch.Tensor, module, output: bool) -> torch.Tensor:
        """`module`'s hidden-state output (or input) in the model's no-cache forward of `ids`,
        which stops there."""
        got = []

        def take_input(m, args, kwargs):
            got.append(split_hidden(args, kwargs)[0][0].detach().clone())
            raise _Reached

        def take_output(m, args, kwargs, out):
            got.append(first_output(out)[0].detach().clone())
            raise _Reached

        hook = (module.register_forward_hook(take_output, with_kwargs=True) if output
                else module.register_forward_pre_hook(take_input, with_kwargs=True))
        try:
            with torch.no_grad(), self.injected():
                self.model(input_ids=ids[None], use_cache=False)
        except _Reached:
            pass
        finally:
            hook.remove()
        return got[0]

    def sequence(self, ids: torch.Tensor, residual: torch.Tensor | None = None) -> None:
        """The embedding rows of `ids` (1-D), and h_l of that sequence (None: layer 0's input
        is the embedding's own output). The rows kept are those of every id seen so far, made
        again only when `ids` brings a new one: a null's rows may come from its whole embedding
        (a shuffled one permutes vocab x d entries, seconds at SmolLM2's 49,152 x 576), which
        the residual stream would otherwise remake at every (layer, sequence) it alternates."""
        if self.unique is None or not bool(torch.isin(ids, self.unique).all()):
            self.unique = torch.unique(ids if self.unique is None else torch.cat([self.unique, ids]))
            e, maker = self.embedding, self.maker
            name = maker.source(self._names[id(e), "weight"])
            if maker.rowwise:                   # these rows alone: the trained ones, or moved
                rows = maker.tensor(self._tensor_names[id(e), "weight"],
                                    maker.read(self.ckpt, name, self.unique))
            else:
                rows = maker.embedding(self.model, e, self._paths[id(e)], self._embedding_shape,
                                       self._padding_idx, lambda: maker.read(self.ckpt, name))[self.unique]
            rows = rows.to(device=self.device, dtype=self.dtype)
            self.embedding.weight = torch.nn.Parameter(rows, requires_grad=False)
        self.residual = residual

    def at(self, start: int, n: int) -> None:
        """The next forward covers positions [start, start + n)."""
        self._window = (start, n)
        self._armed = True

    # ---- hooks -----------------------------------------------------------------------------
    def _rows(self, module, args):
        ids = args[0]
        return (torch.searchsorted(self.unique, ids),) + tuple(args[1:])

    @contextlib.contextmanager
    def injected(self):
        """Layer l's hidden-state input replaced by the stored h_l (when there is one)."""
        if self.residual is None:
            yield
            return

        def inject(module, args, kwargs):
            if not self._armed:                 # a call of the layer inside that forward
                return None
            self._armed = False
            start, n = self._window
            # as many positions as reached the layer, ending at the forward's last one (a
            # model without a cache object gets the whole sequence again at every step)
            x = split_hidden(args, kwargs)[0]
            if x.dim() != 3 or x.shape[-1] != self.residual.shape[-1] or x.shape[-2] > start + n:
                raise NotLocal(f"the injection: layer {self.layer} was handed a {tuple(x.shape)} "
                               f"hidden state, not (1, <= {start + n}, {self.residual.shape[-1]}) "
                               f"(a stand-in before it returned another form)")
            m = x.shape[-2]
            h = self.residual[start + n - m:start + n].unsqueeze(0).clone()
            if args:
                return (h,) + tuple(args[1:]), kwargs
            return args, dict(kwargs, hidden_states=h)

        hook = self._real[self.layer].register_forward_pre_hook(inject, with_kwargs=True, prepend=True)
        try:
            yield
        finally:
            hook.remove()


class _Reached(Exception):
    """Layer l was reached (its call is not needed)."""
