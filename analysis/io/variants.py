"""A model group's weight variants as a store records them (docs/nulls.md): the nulls and the
quantization-ensemble members of a trained model, and what a variant group says it is.
The method bodies are the reader's of format 5, moved here unchanged."""
from __future__ import annotations

from functools import cached_property

from sweep.format import schema


class VariantReader:
    """`Store`'s methods for nulls and ensemble members (analysis/io/store.py)."""

    @cached_property
    def null(self) -> dict | None:
        """For a null model (docs/nulls.md): {"of": the trained model's name, "kind":
        "random_init" or "shuffled", "seed": k}; None for a trained model."""
        null = self.group.attrs.get("null")
        return dict(null) if null else None

    @cached_property
    def quantization(self) -> dict | None:
        """For a member of a quantization ensemble (docs/nulls.md): {"of": the trained model's
        name, "member": k, "ensemble": N}; None otherwise. A member is not a null."""
        q = self.group.attrs.get("quantization")
        return dict(q) if q else None

    @cached_property
    def ensemble(self) -> list[str]:
        """Names of this model's quantization-ensemble members in the store, in store order."""
        return schema.quant_families(self.root).get(self.name, [])

    @cached_property
    def nulls(self) -> list[str]:
        """Names of this model's null models in the store, in store order."""
        return schema.null_families(self.root).get(self.name, [])
