"""The registry of weight-variant kinds (sweep/format/variants.py; docs/nulls.md): one
registration per kind, naming its role, the class that makes its weights, and what making
them costs a worker. Nothing else in tdos branches on a kind's name.

This module imports nothing heavy: config validation reads the kinds' names and roles from
it (sweep/config/variants.py) before torch is loaded, and the budget their costs. The maker
class (sweep/checkpoints/makers.py `Maker`) is imported only where weights are made (a
worker, `tdos export-null`); a registration may name it as "module:Class" to keep it so.

A new kind is one `register(Kind(...))` — here for a kind of tdos, or in any module imported
on the client and on every worker (a test, a user's plugin module given to Dask's
`--preload`) — and its row in docs/nulls.md's table of kinds.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from sweep.format.variants import ROLES, Variant


@dataclass(frozen=True)
class Cost:
    """Bytes a worker holds, beyond the model's own, while it makes one variant's weights on
    one route: per entry of the input embedding (vocab x d), per parameter of the largest
    decoder layer, per parameter of the whole model."""

    table: float = 0
    layer: float = 0
    model: float = 0

    def bytes(self, info) -> int:
        """For a model of `info` (sweep.plan.architecture.ModelInfo)."""
        return int(self.table * info.vocab_size * info.d_model + self.layer * info.block_params
                   + self.model * info.n_params)


@dataclass(frozen=True)
class Kind:
    """One kind of weight variant."""

    name: str                   # the YAML key under `nulls:` and the group's `<of>.<name>.<seed>`
    role: str                   # "null" | "ensemble" (sweep/format/variants.py ROLES)
    maker: str | type           # its Maker subclass, or "module:Class" imported on first use
    local: Cost = field(default_factory=Cost)    # making it with one decoder layer resident
    whole: Cost = field(default_factory=Cost)    # making it in a whole loaded model
    help: str = ""              # one line: how its weights are made (docs/config.md's row)

    def cost(self, whole: bool) -> Cost:
        return self.whole if whole else self.local

    def make(self, variant: Variant):
        """The Maker of `variant` (of this kind)."""
        cls = self.maker
        if isinstance(cls, str):
            module, _, name = cls.partition(":")
            cls = getattr(importlib.import_module(module), name)
        return cls(variant)


KINDS: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    """Add `kind` to the registry (once per name)."""
    if kind.role not in ROLES:
        raise ValueError(f"kind {kind.name!r}: role {kind.role!r} is not one of {', '.join(ROLES)}")
    if kind.name in KINDS and KINDS[kind.name] != kind:
        raise ValueError(f"kind {kind.name!r} is registered already")
    if not kind.name.isidentifier():
        raise ValueError(f"kind {kind.name!r}: a kind's name is a YAML key and a store group's "
                         f"middle part: letters, digits and '_'")
    KINDS[kind.name] = kind
    return kind


def names(role: str | None = None) -> tuple[str, ...]:
    """The registered kinds (of `role`), in registration order."""
    return tuple(n for n, k in KINDS.items() if role is None or k.role == role)


def get(name: str) -> Kind:
    try:
        return KINDS[name]
    except KeyError:
        raise KeyError(f"weight-variant kind {name!r} is not registered in this process (kinds: "
                       f"{', '.join(KINDS)}) — import the module that registers it on the client "
                       f"and on every worker (Dask's --preload)") from None


def maker(variant: Variant | None):
    """The Maker of `variant`; None: the trained weights as stored (the base Maker)."""
    if variant is None:
        from sweep.checkpoints.makers import Maker

        return Maker(None)
    return get(variant.kind).make(variant)


# ---- the kinds of tdos (docs/nulls.md, "The kinds") -------------------------------------------
# costs: what sweep/generic/local.py and the whole-model route hold while making them
register(Kind("random_init", "null", "sweep.checkpoints.nulls:RandomInit",
              local=Cost(table=4),            # the input embedding made whole, float32
              whole=Cost(model=4),            # fresh float32 tensors of every module
              help="the same architecture initialised by the model's own `_init_weights`"))
register(Kind("shuffled", "null", "sweep.checkpoints.nulls:Shuffled",
              local=Cost(table=12),           # the embedding in float32 and its int64 permutation
              whole=Cost(table=8),            # the largest tensor's permutation
              help="each weight tensor's entries permuted (norms and embeddings too)"))
register(Kind("gaussian", "null", "sweep.checkpoints.nulls:Gaussian",
              local=Cost(table=12),           # the embedding in float32 and its float64 copy (its
                                              # moments), then the embedding, its draw, the result
              whole=Cost(table=12),           # the largest tensor's float64 copy, draw and result
              help="each weight tensor drawn iid normal with the trained tensor's own mean and sd"))
register(Kind("shuffled_layers", "null", "sweep.checkpoints.nulls:ShuffledLayers",
              whole=Cost(model=8),            # the decoder layers' tensors kept while they move
              help="the trained decoder layers in a seeded order (a derangement), embedding and "
                   "head kept: the shared-basis null for cross-layer observables "
                   "([nulls.md](nulls.md#the-shared-basis-null-shuffled_layers))"))
register(Kind("quantized", "ensemble", "sweep.checkpoints.ensemble:Quantized",
              local=Cost(layer=16),           # half a layer: weights, gaps, draw, result in float64
              whole=Cost(table=32),           # the embedding, the same four in float64
              help="every stored weight of a quantized GGUF moved within its own rounding bin"))

# the kinds tdos itself registers: the generated docs list these, not a test's or a plugin's
OWN = tuple(KINDS)
