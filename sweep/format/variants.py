"""Weight variants as a store holds them: one concept from the YAML to the report.

A variant is a model swept beside a trained one, with weights made from the trained model's
own checkpoint: a null (weights that learned nothing, or that keep one property of the
trained weights and break the rest) or a member of an ensemble (the trained model as far as
its file can tell, e.g. a quantized checkpoint's weights moved within their rounding bins).
Which kinds exist, and how each kind's weights are made, is the sweep's registry of weight
makers; the store carries everything a reader needs, so nothing that reads a store branches
on a kind's name.

On disk: the variant's group is named `<of>.<kind>.<seed>` and carries the group attribute
`variant` = {"kind", "seed", "of", "role"} (`Variant.attrs`). `role` tells a reader what the
variant is for without knowing its kind:

- "null": a reference the trained model is compared against, one kind at a time, never
  pooled across kinds (docs/nulls.md);
- "ensemble": the trained model's own uncertainty, read as the spread of its observables.
"""
from __future__ import annotations

from dataclasses import dataclass

ROLES = ("null", "ensemble")
NOUNS = {"null": "null model", "ensemble": "ensemble member"}   # what messages call one of a role
ATTR = "variant"            # the group attribute that marks a variant


@dataclass(frozen=True)
class Variant:
    """One variant of trained model `of`: weights of kind `kind` drawn from seed `seed`."""
    kind: str
    seed: int
    of: str
    role: str = "null"

    @property
    def group(self) -> str:
        """Its store group's name."""
        return f"{self.of}.{self.kind}.{self.seed}"

    def attrs(self) -> dict:
        """The group attribute `variant` (JSON)."""
        return {"kind": self.kind, "seed": int(self.seed), "of": self.of, "role": self.role}

    @classmethod
    def from_attrs(cls, attrs) -> "Variant | None":
        """The variant a group's attributes declare, or None for a trained model."""
        v = attrs.get(ATTR)
        if v:
            return cls(kind=str(v["kind"]), seed=int(v["seed"]), of=str(v["of"]),
                       role=str(v.get("role", "null")))
        return None


def variants(root) -> dict[str, Variant]:
    """{group name: Variant} of every variant group of the root's `models`, in store order.
    A group still being made has no attributes yet and is not listed."""
    out = {}
    for name in root.attrs.get("models", []):
        if name in root:
            v = Variant.from_attrs(root[name].attrs)
            if v is not None:
                out[name] = v
    return out


def trained_models(root) -> list[str]:
    """The root's models that are not variants, in store order: what `tdos analyze` and
    `tdos compare` read as models of their own."""
    found = variants(root)
    return [n for n in root.attrs.get("models", []) if n in root and n not in found]


def families(root, role: str | None = None) -> dict[str, dict[str, list[str]]]:
    """{trained model: {kind: [variant group names]}} for the variants of `role` (None: every
    role), every trained model a key (an empty dict when it has none), all in store order."""
    out: dict[str, dict[str, list[str]]] = {m: {} for m in trained_models(root)}
    for name, v in variants(root).items():
        if (role is None or v.role == role) and v.of in out:
            out[v.of].setdefault(v.kind, []).append(name)
    return out


def folded(root, role: str | None = None) -> dict[str, list[str]]:
    """{trained model: its variant groups (of `role`; None: every role)}, every trained model a
    key, all in store order: what the views (`tdos status`, the live figure, the /tdos page)
    fold under each model's row."""
    out: dict[str, list[str]] = {m: [] for m in trained_models(root)}
    for name, v in variants(root).items():
        if (role is None or v.role == role) and v.of in out:
            out[v.of].append(name)
    return out
