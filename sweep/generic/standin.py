"""Stand-ins for the decoder layers before the resident one (sweep/generic/local.py).

The model's own loop calls every decoder layer and unpacks what it returns its own way: a
tensor (`hidden_states = layer(...)`), a tuple led by the hidden state (BLOOM's and Falcon's
`outputs = block(...); hidden_states = outputs[0]`), a state list handed to the next layer
(RWKV's `hidden, state, attentions = block(...)`). Some loops also read attributes of each
layer module (Nemotron-H picks a layer's mask by its `block_type`). A stand-in gives the loop
what the real layer would, entry by entry:

- its output has the real layer's `Form`: read off layer l's own return value in a probe
  forward (`probe`), each entry matched on shape and type to the hidden-state input, to None,
  or to one of the call's own inputs passed back (a state list); the probe then checks that
  the hidden state reaching layer l through the stand-ins is the one the first stand-in got
  (same shape, dtype and values) and that every state object reached it unchanged;
- every attribute the loop reads of it (type tags, indices, flags, a submodule whose cache
  RecurrentGemma sets up) is the real layer's;
- its cache layer (when it holds keys) grows by the tokens of the call, as the real layer's
  would, with a placeholder key and value of one channel.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from sweep.generic.decode import split_hidden, tensor_list

HIDDEN = "hidden"          # an output entry that is the layer's hidden state


class WrongStandIn(Exception):
    """The stand-ins' output did not reach layer l as the real layers' would."""


@dataclass(frozen=True)
class Form:
    """What a decoder layer returns. `container` None: the hidden state itself; else a
    tuple or list whose entries are HIDDEN, None, or ("arg", i) / ("kwarg", name): that input
    of the call (after the hidden state) returned as it came (a state list). None stands for
    what the loop reads only on request (attention weights)."""

    container: type | None
    entries: tuple = ()

    def output(self, hidden: torch.Tensor, args: tuple, kwargs: dict):
        if self.container is None:
            return hidden
        return self.container(self._entry(e, hidden, args, kwargs) for e in self.entries)

    @staticmethod
    def _entry(e, hidden, args, kwargs):
        if e == HIDDEN:
            return hidden
        if e is None:
            return None
        if e == STATE:
            return next((v for v in states(args, kwargs).values() if isinstance(v, list)), None)
        where, key = e
        return args[key] if where == "arg" else kwargs.get(key)


# forms tried until one lets the probe reach layer l (the form used is then layer l's own);
# STATE: the call's first state list, passed on (RWKV's loop unpacks three entries)
STATE = "state"
CANDIDATES = (Form(None), Form(tuple, (HIDDEN, None)), Form(tuple, (HIDDEN, STATE, None)))


def form_of(out, x: torch.Tensor, args: tuple, kwargs: dict, layer: int) -> Form:
    """The Form of `out`, layer `layer`'s return value for hidden-state input `x` (1, n, d) and
    the rest of its call (`args`, `kwargs`); WrongStandIn when a stand-in could not give it."""
    def hidden(t) -> bool:
        return isinstance(t, torch.Tensor) and t.shape == x.shape and t.dtype == x.dtype

    if hidden(out):
        return Form(None)
    if type(out) not in (tuple, list):
        raise WrongStandIn(f"layer {layer} returns a {type(out).__name__}, not the hidden state "
                           f"{tuple(x.shape)} nor a tuple of it")
    entries = []
    for i, e in enumerate(out):
        if hidden(e):
            entries.append(HIDDEN)
        elif e is None:
            entries.append(None)
        else:
            source = next((("arg", k) for k, a in enumerate(args) if a is e), None) or next(
                (("kwarg", k) for k, a in kwargs.items() if a is e), None)
            if source is None and states((e,), {}):
                raise WrongStandIn(f"layer {layer} returns a new {type(e).__name__} as entry {i} of "
                                   f"its output: a state a stand-in cannot make")
            # else what the loop reads only when asked (BLOOM's attention weights, returned
            # whatever output_attentions says): a stand-in gives None
            entries.append(source)
    if HIDDEN not in entries:
        raise WrongStandIn(f"layer {layer}'s output holds no tensor shaped like its input {tuple(x.shape)}")
    return Form(type(out), tuple(entries))


class StandIn(torch.nn.Module):
    """Decoder layer j < l in the model's loop: returns the hidden state untouched in `form`,
    grows its cache layer, and reads as the real layer `real` for every other attribute."""

    def __init__(self, index: int, real: torch.nn.Module, form: Form):
        super().__init__()
        self._slot, self._form = index, form
        self.__dict__["_real"] = real           # not a submodule: its weights stay the model's

    def __getattr__(self, name: str):
        """What the model reads of a layer (its type tag, index, flags, a submodule whose
        cache it sets up) is the real layer's."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "_real":
                raise
            return getattr(self.__dict__["_real"], name)

    def forward(self, hidden_states, *args, **kwargs):
        from transformers import cache_utils

        cache = next((v for v in (*args, *kwargs.values()) if isinstance(v, cache_utils.Cache)), None)
        held = cache.layers[self._slot] if cache is not None and self._slot < len(cache.layers) else None
        # a layer without keys (Nemotron-H's MLP layers) has a DummyLayer that refuses them
        if hasattr(held, "keys") and not isinstance(held, getattr(cache_utils, "DummyLayer", ())):
            n = hidden_states.shape[-2]
            placeholder = hidden_states.new_zeros(1, 1, n, 1)
            held.update(placeholder, placeholder)
        return self._form.output(hidden_states, args, kwargs)


def states(args: tuple, kwargs: dict) -> dict:
    """The state objects of a layer's call that the loop hands from layer to layer, by
    argument position or name: caches, and lists of tensors the layers update in place
    (RWKV's; a tuple such as rotary (cos, sin) is an input, made per layer type)."""
    from transformers.cache_utils import Cache

    named = {("arg", i): v for i, v in enumerate(args)} | {("kwarg", k): v for k, v in kwargs.items()}
    return {k: v for k, v in named.items()
            if isinstance(v, Cache) or (isinstance(v, list) and tensor_list(v))}


class _Reached(Exception):
    def __init__(self, form: Form):
        self.form = form


def probe(model: torch.nn.Module, layers, real: torch.nn.Module, layer: int, ids: torch.Tensor,
          set_form) -> Form:
    """Layer `layer`'s Form (above), checked: `set_form(form)` gives the stand-ins
    `layers[:layer]` that form; `ids` (1, n) the probe tokens of a cached forward."""
    first = {}

    def take_first(module, args, kwargs):
        x, rest, kw = split_hidden(args, kwargs)
        first.update(x=x.detach().clone(), states=states(rest, kw))

    def check(module, args, kwargs):
        x, rest, kw = split_hidden(args, kwargs)
        got = first["x"]
        if x.shape != got.shape or x.dtype != got.dtype or not torch.equal(x, got):
            raise WrongStandIn(f"the stand-ins hand layer {layer} a {tuple(x.shape)} {x.dtype} "
                               f"hidden state, not the {tuple(got.shape)} {got.dtype} the first one got")
        lost = [k for k, v in first["states"].items() if states(rest, kw).get(k) is not v]
        if lost:
            raise WrongStandIn(f"the stand-ins do not hand layer {layer} the state "
                               f"{lost[0][1]!r} the first layer got")

    def reached(module, args, kwargs, out):
        x, rest, kw = split_hidden(args, kwargs)
        raise _Reached(form_of(out, x, rest, kw, layer))

    def run(form: Form) -> Form:
        set_form(form)
        with torch.no_grad():
            model(input_ids=ids, use_cache=True)
        raise RuntimeError(f"layer {layer} was not called by {type(model).__name__}")

    hooks = [layers[0].register_forward_pre_hook(take_first, with_kwargs=True),
             real.register_forward_pre_hook(check, with_kwargs=True),
             real.register_forward_hook(reached, with_kwargs=True)]
    errors = []
    try:
        for candidate in CANDIDATES:
            try:
                run(candidate)
            except _Reached as r:
                found = r.form
                break
            except Exception as e:  # the loop's own unpacking, or a check above
                errors.append(f"{type(e).__name__}: {e}")
        else:
            raise WrongStandIn(f"no stand-in output reaches layer {layer} ({'; '.join(errors)})")
        if found != candidate:       # the real layer's own form must reach it too
            try:
                run(found)
            except _Reached as r:
                if r.form != found:
                    raise WrongStandIn(f"layer {layer} returns {r.form} after stand-ins of form "
                                       f"{found}") from None
        return found
    finally:
        for h in hooks:
            h.remove()
