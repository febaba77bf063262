"""A store that grows (docs/sweeps.md, "Growing a store"): a config that adds layers,
sequences, models (variants, further checkpoints) or depth spans to its store's config extends
the store in place; one that leaves some out only hides them.

What a block *is* never changes under it: the checkpoint's files, the dtype, the engine,
token_block, the length and the token ids of every stored sequence. A change there is refused
in one line naming it (`refused_changes` at the config's level, `Growth.of` per group). The
extent is free: the group's arrays are resized along `layer`, `seq` and `span` (one chunk per
row and sequence there, so no finished chunk is rewritten; zarr's resize writes only the
array's metadata), the new rows' ledger cells read 0, and only they are computed. Rows are
appended: the store's row order is then not the layers' order (readers go through the `layer`
array, analysis.io.store.Store.row).

Growing a group first records what it adds (`growing`), resizes the arrays, then writes the
index arrays (`tokens`, `layer_length`, `layer`) and drops the record: a sweep stopped on the
way finishes the same growth when it reopens the store. The root keeps the store's `history`:
one entry per growth (date, what was added, the new fingerprint).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import zarr

from sweep.errors import StoreMismatch
from sweep.format.ledger import PENDING, Ledger
from sweep.format.variants import NOUNS, ROLES
from sweep.plan.make import ModelPlan, Plan

# config fields that say how much is swept, not what a block is: they may change freely
# (per model: its `layers`, its `nulls`, its quantization ensemble; a model of another name is
# another group, and so is each variant: each null and each ensemble member)
EXTENT = ("layers", "inputs.sequences", "depth.spans")
MODEL_EXTENT = ("layers", "nulls", "quantization")


def refused_changes(old: dict, new: dict) -> list[str]:
    """`field: old -> new` of every change between two identity dicts (sweep.config.identity)
    that is not a change of extent. Models are matched by name; depth added or removed is a
    change (its walks need every J_tt again)."""
    diffs = []
    om = {m.get("name", i): m for i, m in enumerate(old.get("models", []))}
    nm = {m.get("name", i): m for i, m in enumerate(new.get("models", []))}
    for name in [n for n in om if n in nm]:
        a, b = ({k: v for k, v in d[name].items() if k not in MODEL_EXTENT} for d in (om, nm))
        diffs += _diffs(_flatten(a, f"models[{name}]"), _flatten(b, f"models[{name}]"))
    rest = [{k: v for k, v in d.items() if k != "models"} for d in (old, new)]
    both_depth = all(d.get("depth") is not None for d in rest)
    return diffs + [d for d in _diffs(_flatten(rest[0]), _flatten(rest[1]))
                    if not _is_extent(d.split(":")[0], both_depth)]


def _is_extent(key: str, both_depth: bool) -> bool:
    if key == "depth.spans":
        return both_depth
    return key in EXTENT or key.startswith("layers.")


def _diffs(old: dict, new: dict) -> list[str]:
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(old.keys() | new.keys())
            if old.get(k) != new.get(k)]


def _flatten(d, prefix: str = "") -> dict:
    if isinstance(d, dict):
        out = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(d, list) and d and all(isinstance(v, dict) for v in d):
        out = {}
        for i, v in enumerate(d):
            out.update(_flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: d}


def group_identity(m: ModelPlan) -> dict:
    """What a block of model `m` is, as its group's `model` attribute records it."""
    identity = {"path": m.spec.path, "revision": m.spec.revision, "arch": m.info.arch,
                "engine": m.engine,
                "files_sha256": {f: r["sha256"] for f, r in m.checkpoint["files"].items()}}
    if m.variant is not None:          # a variant names itself beside its base checkpoint's files
        identity["variant"] = m.variant.attrs()
    return {**identity, "dtype": m.spec.dtype}


@dataclass(frozen=True)
class GroupGrowth:
    """What one group gains: made anew, or rows (model layer, tokens), sequences, spans added."""

    name: str
    new: bool = False
    rows: tuple[tuple[int, int], ...] = ()
    seqs: tuple[int, int] = (0, 0)         # sequences held before, after
    spans: tuple[int, ...] = ()
    role: str | None = None                # a weight variant's role ("null", "ensemble"); None: a model
    depth: bool = False                    # the group holds walks up the layers (`depth:`)

    @property
    def added(self) -> bool:
        return self.new or bool(self.rows) or self.seqs[1] > self.seqs[0] or bool(self.spans)


@dataclass(frozen=True)
class Growth:
    """How a config extends (or shows part of) its existing store."""

    groups: tuple[GroupGrowth, ...]
    todo: int          # blocks of the config not done yet
    kept: int          # blocks of the config already done: kept, not computed again
    hidden: int        # done blocks of the store outside the config: kept, read by the analysis

    @property
    def added(self) -> bool:
        return any(g.added for g in self.groups)

    @classmethod
    def of(cls, root: zarr.Group, plan: Plan) -> "Growth":
        """Read only: what `plan` adds to the store `root`; StoreMismatch (one line) when it
        changes what a stored block is."""
        groups, todo, kept = [], 0, 0
        for m in plan.models:
            planned = m.tokens.shape[0] * sum(math.ceil(n / plan.token_block) for _, n in m.rows)
            if not _ready(root, m.name):
                groups.append(GroupGrowth(m.name, new=True, role=_role(m)))
                todo += planned
                continue
            g = root[m.name]
            groups.append(_group_growth(g, m, plan))
            done = Ledger.read(g).within(m.layers, m.tokens.shape[0]).done
            todo, kept = todo + planned - done, kept + done
        hidden = sum(Ledger.read(root[n]).done for n in root.attrs.get("models", [])
                     if _ready(root, n)) - kept
        return cls(tuple(groups), todo, kept, hidden)

    def what(self) -> str:
        """What is added, e.g. "+1 layer (1), +2 sequences" ("" when nothing)."""
        parts = []
        for role, what in ((None, "model"), *((r, NOUNS[r]) for r in ROLES)):
            new = [g.name for g in self.groups if g.new and g.role == role]
            if new:
                parts.append(f"+{len(new)} {what}{'s' * (len(new) > 1)} ({', '.join(new)})")
        layers = sorted({layer for g in self.groups for layer, _ in g.rows})
        if layers:
            parts.append(f"+{len(layers)} layer{'s' * (len(layers) > 1)} ({', '.join(map(str, layers))})")
        seqs = {g.seqs[1] - g.seqs[0] for g in self.groups if g.seqs[1] > g.seqs[0]}
        if seqs:
            parts.append(" ".join(f"+{n} sequence{'s' * (n > 1)}" for n in sorted(seqs))
                         + ("" if len(seqs) == 1 else " (per model)"))
        spans = sorted({s for g in self.groups for s in g.spans})
        if spans:
            parts.append(f"+{len(spans)} depth span{'s' * (len(spans) > 1)} ({', '.join(map(str, spans))})")
        return ", ".join(parts)

    def describe(self) -> str:
        """One line: "grows the store: +1 layer (1), +2 sequences; 12 blocks to compute, 8 done kept"."""
        head = f"grows the store: {self.what()}" if self.added else "nothing added to the store"
        redo = any(g.spans or g.rows for g in self.groups if not g.new and g.depth)
        tail = (f"; {self.hidden} done blocks outside this config kept (hidden from this sweep, "
                f"read by the analysis)" if self.hidden else "")
        return (f"{head}; {self.todo} blocks to compute, {self.kept} done kept"
                + ("; every walk up the layers redone (its stacks need each J_tt again)" if redo else "")
                + tail)

    def history_entry(self, fingerprint: str) -> dict:
        return {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "added": self.what(),
                "fingerprint": fingerprint}


def _ready(root: zarr.Group, name: str) -> bool:
    return name in root and bool(root[name].attrs.get("complete"))


def _group_growth(g: zarr.Group, m: ModelPlan, plan: Plan) -> GroupGrowth:
    diffs = _diffs(_short(g.attrs["model"]), _short(group_identity(m)))
    if g.attrs["inputs"]["token_block"] != plan.token_block:
        diffs.append(f"token_block: {g.attrs['inputs']['token_block']} -> {plan.token_block}")
    stored = g["tokens"]
    (S0, L0), (S, L) = stored.shape, m.tokens.shape
    if L0 != L:
        diffs.append(f"inputs.length: {L0} -> {L}")
    else:
        n = min(S0, S)
        differ = np.flatnonzero((stored[:n] != m.tokens[:n]).any(axis=1))
        if differ.size:
            diffs.append(f"the token ids of stored sequence {int(differ[0])} (of {differ.size} "
                         f"that differ)")
    have = dict(zip(g["layer"][...].tolist(), g["layer_length"][...].tolist()))
    diffs += [f"layer {layer}: {have[layer]} -> {n} tokens" for layer, n in m.rows
              if layer in have and have[layer] != n]
    if diffs:
        raise StoreMismatch(f"store: {plan.store} holds model {m.name!r} with other blocks "
                            f"({'; '.join(diffs)}); a store grows by layers, sequences, models "
                            f"and spans, never by changing what a block is — use a new --store "
                            f"path or the original settings")
    spans = (g.attrs.get("depth") or {}).get("spans") or []
    return GroupGrowth(m.name, rows=tuple((lay, n) for lay, n in m.rows if lay not in have),
                       seqs=(S0, max(S0, S)), spans=tuple(s for s in m.depth_spans if s not in spans),
                       role=_role(m), depth="depth" in g.attrs)


def _role(m: ModelPlan) -> str | None:
    return m.variant.role if m.variant is not None else None


def _short(identity: dict) -> dict:
    """The group identity, files by name: a changed file is named, not its two hashes."""
    out = {k: v for k, v in identity.items() if k != "files_sha256"}
    for f, h in (identity.get("files_sha256") or {}).items():
        out[f"file {f}"] = h[:12]
    return out


def grow_group(g: zarr.Group, m: ModelPlan, gg: GroupGrowth) -> None:
    """Add `gg`'s rows, sequences and spans to group `g` (what `m` plans)."""
    rows0, seqs0 = int(g["layer"].shape[0]), int(g["tokens"].shape[0])
    g.attrs["growing"] = {"rows_from": rows0, "rows": [list(r) for r in gg.rows],
                          "seqs_from": seqs0, "seqs": gg.seqs[1], "spans": list(gg.spans)}
    finish_growing(g, m)


def finish_growing(g: zarr.Group, m: ModelPlan) -> None:
    """Resize every array to what `growing` records, then the index arrays, then drop it:
    idempotent, so a growth stopped part way is finished by the next sweep."""
    rec = g.attrs.get("growing")
    if rec is None:
        return
    R0, S0, S = rec["rows_from"], rec["seqs_from"], rec["seqs"]
    if m.tokens.shape[0] < S:
        raise StoreMismatch(f"store: model {m.name!r} was being grown to {S} sequences when a "
                            f"sweep stopped — rerun the config that grew it")
    depth = g.attrs.get("depth")
    spans = list(depth["spans"]) + [s for s in rec["spans"] if s not in depth["spans"]] if depth else []
    rows = [tuple(r) for r in rec["rows"]]
    size = {"layer": R0 + len(rows), "seq": S, "span": len(spans)}
    index = ("tokens", "layer_length", "layer")            # last: they say what the group holds
    for name in [n for n in g.array_keys() if n not in index] + list(index):
        a = g[name]
        shape = tuple(max(n, size.get(d, n)) for d, n in zip(a.metadata.dimension_names, a.shape))
        if shape != a.shape:
            a.resize(shape)
        if name == "tokens" and S > S0:
            a[S0:S] = m.tokens[S0:S]
        elif name in ("layer", "layer_length") and rows:
            a[R0:] = np.array([r[0] if name == "layer" else r[1] for r in rows], np.int64)
    if depth and (rows or rec["spans"]):      # the stacks need every J_tt again: walks redone
        g["depth_ledger"][:S0] = PENDING
        layers = g["layer"][...]
        g.attrs["depth"] = {"spans": [int(s) for s in spans],
                            "layers": [int(layers.min()), int(layers.max())]}
    g.attrs["inputs"] = {**g.attrs["inputs"], "sequences": int(S)}
    del g.attrs["growing"]


def record(root: zarr.Group, plan: Plan, growth: Growth, config: dict) -> None:
    """The root's config, fingerprint and models after a growth, and its history entry."""
    names = list(root.attrs.get("models", []))
    history = list(root.attrs.get("history", []))
    root.attrs.update({"config": config, "fingerprint": plan.fingerprint,
                       "models": names + [m.name for m in plan.models if m.name not in names],
                       "history": history + [growth.history_entry(plan.fingerprint)]})
