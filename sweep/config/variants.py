"""A model's weight variants as the config writes them (docs/nulls.md): its `nulls:` (any
registered null kind, with a number of seeds each) and its `quantization:` ensemble, with
their checks. The kinds and their roles are read from the registry
(sweep/checkpoints/kinds.py), which imports nothing heavy: a misspelled kind is refused at
load, before torch is.

    nulls: {random_init: 3, shuffled: 3, gaussian: 3, sequences: 2}
    quantization: {ensemble: 8, sequences: 2}

**The tokens.** Every variant of a model reads the first n of its sequences, the same n for
nulls and members: a member is then compared with the nulls on exactly their tokens
(REFEREE.md 12). n is `nulls.sequences`, else `quantization.sequences`, else every sequence;
both given and different is refused in one line.
"""
from __future__ import annotations

from dataclasses import dataclass

from sweep.checkpoints import kinds
from sweep.errors import ConfigError
from sweep.format.fields import option
from sweep.format.variants import Variant


@dataclass(frozen=True)
class NullsConfig:
    """Null models of one model: per registered null kind, seeds 0..n-1, each swept like a
    model into its own group `<model>.<kind>.<seed>`."""

    counts: tuple[tuple[str, int], ...] = ()   # (kind, n), in the registry's order
    sequences: int | None = None               # the first n of inputs.sequences (default: all)

    def seeds(self) -> list[tuple[str, int]]:
        """(kind, seed) of every null, kinds in the registry's order."""
        return [(kind, k) for kind, n in self.counts for k in range(n)]

    def record(self) -> dict:
        """What the store's fingerprint covers of it (sweep/config/identity.py)."""
        return {**dict(self.counts), "sequences": self.sequences}

    def __getattr__(self, kind: str) -> int:
        """`nulls.random_init`: the seeds of a registered null kind (0 when not given)."""
        if kind in kinds.names("null"):
            return dict(self.counts).get(kind, 0)
        raise AttributeError(kind)

    @classmethod
    def doc_rows(cls) -> list[tuple[str, str, str]]:
        """docs/config.md's rows of `nulls:` (sweep/config/docs.py): (field, type, meaning), one
        per null kind of tdos (not a test's or a plugin's registration), then `sequences`."""
        rows = [(k, "integer >= 0, default 0",
                 f"null models `<name>.{k}.0..N-1`: {kinds.get(k).help}, seeds 0..N-1")
                for k in kinds.names("null") if k in kinds.OWN]
        return rows + [("sequences", "integer in 1..`inputs.sequences`, default all",
                        "the nulls sweep the first n sequences only (the report must say so); "
                        "refused with `trust_remote_code: true` (a worker cannot make such a "
                        "model's weights again); part of the store's identity")]

    @classmethod
    def parse(cls, raw, where: str) -> "NullsConfig":
        """The YAML mapping `raw` at field `where`: registered null kinds and `sequences`."""
        from sweep.config.validate import check_type, reject_unknown

        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: expected a mapping of null kinds to seeds, got "
                              f"{type(raw).__name__} {raw!r} — e.g. {{random_init: 4, shuffled: 4}}")
        known = kinds.names("null")
        reject_unknown(raw, (*known, "sequences"), where)
        counts = tuple((k, check_type(raw[k], int, f"{where}.{k}")) for k in known if k in raw)
        sequences = check_type(raw.get("sequences"), int | None, f"{where}.sequences")
        return cls(counts, sequences)


@dataclass(frozen=True)
class QuantizationConfig:
    """The quantization ensemble of a quantized GGUF model (docs/nulls.md "The quantization
    ensemble"): `ensemble` members of kind `KIND`, each swept like a model into its own group
    `<model>.quantized.<k>`. Not nulls: they are the trained model as far as its file can tell."""

    KIND = "quantized"                  # the registered ensemble kind these members are
    ensemble: int = option(help="the quantization ensemble of a quantized GGUF model: members "
                           "`<name>.quantized.0..N-1`, member k moves each weight by a uniform draw "
                           "seeded by k within its own rounding bin (± half its block's step; "
                           "F16/BF16: half the gap to each neighbour; F32 unchanged), swept like "
                           "the model; not nulls. Refused for a checkpoint that is not a GGUF file "
                           "or has nothing rounded in it; part of the store's identity",
                           kind="integer >= 1", see="nulls.md#the-quantization-ensemble")
    sequences: int | None = option(None, "the members sweep the first n sequences only; the same n "
                                   "as `nulls.sequences` or refused: members read the nulls' tokens",
                                   kind="integer in 1..`inputs.sequences`",
                                   default_text="default the nulls' (else all)",
                                   see="nulls.md#the-quantization-ensemble")

    def seeds(self) -> list[tuple[str, int]]:
        return [(self.KIND, k) for k in range(self.ensemble)]


@dataclass(frozen=True)
class Planned:
    """One variant of a model as its config asks for it."""

    variant: Variant
    where: str                          # the config field it comes from
    sequences: int | None               # the first n of inputs.sequences (None: all)


def variants_of(m) -> list[Planned]:
    """Every variant of model spec `m` (sweep.config.sections.ModelSpec), its nulls first."""
    out = []
    for section, cfg in (("nulls", m.nulls), ("quantization", m.quantization)):
        for kind, seed in (cfg.seeds() if cfg is not None else ()):
            out.append(Planned(Variant(kind, seed, m.name, kinds.get(kind).role),
                               f"{m.where}.{section}", shared_sequences(m)))
    return out


def shared_sequences(m) -> int | None:
    """The first n sequences every variant of `m` reads (module doc); None: all of them."""
    n, q = m.nulls, m.quantization
    return (n.sequences if n is not None and n.sequences is not None
            else q.sequences if q is not None else None)


def check_nulls(m, sequences: int) -> None:
    """A model's `nulls:`: counts >= 0, sequences in 1..inputs.sequences, and a model whose
    weights the worker can make again (its own modelling code is refused: tdos cannot vouch
    that its _init_weights is complete and seedable)."""
    n = m.nulls
    if n is None:
        return
    for key, count in n.counts:
        if count < 0:
            raise ConfigError(f"{m.where}.nulls.{key}: must be >= 0 seeds, got {count} — "
                              f"e.g. {key}: 2")
    if n.sequences is not None and not 1 <= n.sequences <= sequences:
        raise ConfigError(f"{m.where}.nulls.sequences: {n.sequences} must be in 1..inputs.sequences "
                          f"({sequences}) — lower it, or leave it out to sweep every sequence")
    if m.trust_remote_code and n.seeds():
        raise ConfigError(f"{m.where}.nulls: {m.path} runs its own modelling code "
                          f"(trust_remote_code), whose weights tdos cannot make again on a worker — "
                          f"remove `nulls:` from this model")


def check_quantization(m, sequences: int) -> None:
    """A model's `quantization:`: ensemble >= 1, sequences in 1..inputs.sequences and the
    nulls' (module doc). Whether the file is quantized is the plan's to say: it reads the file
    (sweep/checkpoints/ensemble.py)."""
    q = m.quantization
    if q is None:
        return
    if q.ensemble < 1:
        raise ConfigError(f"{m.where}.quantization.ensemble: must be >= 1 members, got {q.ensemble} "
                          f"— e.g. ensemble: 8, or remove `quantization:`")
    if q.sequences is not None and not 1 <= q.sequences <= sequences:
        raise ConfigError(f"{m.where}.quantization.sequences: {q.sequences} must be in "
                          f"1..inputs.sequences ({sequences}) — lower it, or leave it out to sweep "
                          f"every sequence")
    nulls = m.nulls.seeds() if m.nulls is not None else []
    theirs = (m.nulls.sequences or sequences) if nulls else None
    if theirs is not None and q.sequences is not None and q.sequences != theirs:
        raise ConfigError(f"{m.where}.quantization.sequences: {q.sequences} differs from the "
                          f"nulls' {theirs} — members read the nulls' tokens (docs/nulls.md); leave "
                          f"it out, or set both to the same number")


def variant_names(m) -> list[tuple[str, str]]:
    """(store group name, config field) of every variant of model `m`."""
    return [(p.variant.group, p.where) for p in variants_of(m)]
