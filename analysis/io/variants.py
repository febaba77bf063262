"""A model group's weight variants as a store records them (docs/nulls.md, sweep/format/
variants.py): what a variant group says it is, and the nulls and ensemble members of a
trained model."""
from __future__ import annotations

from functools import cached_property

from sweep.format import variants
from sweep.format.variants import Variant


class VariantReader:
    """`Store`'s methods for weight variants (analysis/io/store.py)."""

    @cached_property
    def variant(self) -> Variant | None:
        """For a weight variant (docs/nulls.md): Variant(kind, seed, of, role), a null (role
        "null") or an ensemble member (role "ensemble"); None for a trained model."""
        return Variant.from_attrs(self.group.attrs)

    @cached_property
    def nulls(self) -> list[str]:
        """Names of this model's null models in the store, in store order."""
        return self._variants("null")

    @cached_property
    def ensemble(self) -> list[str]:
        """Names of this model's ensemble members (its quantization ensemble) in the store, in
        store order."""
        return self._variants("ensemble")

    def null_kinds(self) -> dict[str, list[str]]:
        """{kind: names of this model's nulls of it}, each in store order."""
        return variants.families(self.root, "null").get(self.name, {})

    def _variants(self, role: str) -> list[str]:
        return variants.folded(self.root, role).get(self.name, [])
