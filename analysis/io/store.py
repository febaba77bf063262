"""Read a tdos store (docs/store.md; names in sweep/format/schema.py). The store is the only
input of analysis/.

`Store` is one model group; its methods come in the schema's sections, one room each:
metadata here, spectra (analysis/io/spectra.py), the ledger (ledger.py), stacked blocks
(depth.py), token memory (memory.py), the learned decay (ssm.py) and the weight variants
(variants.py).

Rows of `eigenvalues`/`delta` are token positions: row t = eig(J_tt). Blocks whose ledger
cell is not 1 (pending, or flagged for non-finite values) read as NaN rows, so row t is
always token t and every consumer filters with `np.isfinite`.
"""
from __future__ import annotations

import os
from functools import cached_property

import zarr

from analysis.io.depth import DepthReader
from analysis.io.ledger import LedgerReader
from analysis.io.memory import MemoryReader
from analysis.io.spectra import SpectraReader
from analysis.io.ssm import SSMReader
from analysis.io.variants import VariantReader
from sweep.format import schema
from sweep.format.schema import StoreError


def open_store(path, model=None) -> "Store":
    """Open `path` read-only; `model` picks a group (default: the first model of the store)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise StoreError(f"no store at {path}")
    try:
        root = zarr.open_group(path, mode="r")
        attrs = dict(root.attrs)
    except Exception as exc:  # zarr raises several types for a non-zarr folder
        raise StoreError(f"{path} is not a zarr store ({type(exc).__name__})") from None
    schema.check_format(attrs, path)
    models = list(root.attrs.get("models", []))
    if not models:
        raise StoreError(f"{path} holds no model groups")
    name = models[0] if model is None else model
    if name not in models:
        raise StoreError(f"model {name!r} not in {path}; models: {', '.join(models)}")
    return Store(path, root, name)


class _Arrays:
    """A model group whose arrays are looked up once: zarr reads an array's metadata file on
    every `group[name]`, and the analysis asks for the same few arrays thousands of times
    (a small store's analyze spent a third of its time there). An array's shape is fixed when
    first looked up, as `row_layers` is, and which blocks count as done when the ledger is
    first read (analysis/io/ledger.py)."""

    def __init__(self, group):
        self._group, self._arrays = group, {}

    def __getitem__(self, name):
        if name not in self._arrays:
            self._arrays[name] = self._group[name]
        return self._arrays[name]

    def __contains__(self, name) -> bool:
        return name in self._arrays or name in self._group

    def __getattr__(self, attr):
        return getattr(self._group, attr)


class Store(SpectraReader, LedgerReader, DepthReader, MemoryReader, SSMReader, VariantReader):
    """One model group of a store. See docs/api.md for the public reading API."""

    def __init__(self, path, root, name):
        self.path, self.root, self.name = path, root, name
        self.group = _Arrays(root[name])
        self.models = list(root.attrs["models"])

    def model(self, name) -> "Store":
        return open_store(self.path, name)

    def __repr__(self):
        c = self.block_counts()
        return (f"Store({self.path!r}, model={self.name!r}, arch={self.arch}, dtype={self.dtype}, "
                f"layers={self.layers}, done={c['done']}/{c['planned']})")

    # ------------------------------------------------------------------ metadata
    @cached_property
    def identity(self) -> dict:
        return dict(self.group.attrs.get("model", {}))

    @cached_property
    def inputs(self) -> dict:
        return dict(self.group.attrs.get("inputs", {}))

    @property
    def arch(self) -> str:
        return self.identity.get("arch", "unknown")

    @cached_property
    def layer_kinds(self) -> list[str]:
        """The kind of every model layer ("attention", "mamba", "mamba2", "recurrent",
        "mamba2+attention", … with "+moe" when it routes to experts)."""
        kinds = self.group.attrs.get("layer_kinds")
        if kinds:
            return list(kinds)
        n = int(self.group["a_log"].shape[0]) if self.is_mamba else max(self.layers) + 1
        return ["mamba" if self.is_mamba else "attention"] * n

    def layer_kind(self, layer) -> str:
        return self.layer_kinds[int(layer)]

    @property
    def n_model_layers(self) -> int:
        return len(self.layer_kinds)

    @property
    def dtype(self) -> str:
        """Compute dtype of the sweep ('float32' | 'float64')."""
        return self.identity["dtype"]

    @cached_property
    def software(self) -> dict:
        """Versions on the machine that made the store (torch, cuda, ...); {} if upgraded."""
        return dict(self.root.attrs.get("software") or {})

    @cached_property
    def worker_software(self) -> list[dict]:
        """The distinct software of the workers that computed this group's blocks."""
        return list(self.group.attrs.get("worker_software", []))

    @property
    def fingerprint(self) -> str:
        return str(self.root.attrs.get("fingerprint", ""))

    @property
    def creation_id(self) -> str:
        """New each time a store is created: with the fingerprint, the store's identity."""
        return str(self.root.attrs["creation_id"])

    @cached_property
    def row_layers(self) -> list[int]:
        """Model layer index of each row of the arrays, in the store's row order: a grown
        store appends rows (sweep/store/grow.py), so it need not be ascending."""
        return [int(x) for x in self.group["layer"][:]]

    @cached_property
    def layers(self) -> list[int]:
        """The swept model layers, ascending (`row` gives each one's row of the arrays)."""
        return sorted(self.row_layers)

    @cached_property
    def layer_length(self) -> dict[int, int]:
        return dict(zip(self.row_layers, (int(x) for x in self.group["layer_length"][:])))

    @property
    def n_seqs(self) -> int:
        return int(self.group["eigenvalues"].shape[1])

    @property
    def max_length(self) -> int:
        return int(self.group["eigenvalues"].shape[2])

    @property
    def d_model(self) -> int:
        return int(self.group["eigenvalues"].shape[3])

    @property
    def token_block(self) -> int:
        return int(self.inputs["token_block"])

    def row(self, layer) -> int:
        try:
            return self.row_layers.index(int(layer))
        except ValueError:
            raise StoreError(f"layer {layer} not in store (layers: {self.layers})") from None

    # ------------------------------------------------------------------ the primary β
    def beta(self, layer, L=None, **overrides):
        """The primary β at (layer, L), the `Headline` that `tdos analyze` prints for it
        (estimator, mode count, interval, unit, GOF p, modes in the window), under the store's
        recorded analysis settings (`overrides`: Settings fields). L default: the report's.
        The computation lives above this reader (analysis/studies/primary.py); it is reached
        through the package's lazy public names at call time (ARCHITECTURE.md)."""
        import analysis

        settings = analysis.Settings.from_store(self.root.attrs, **overrides)
        return analysis.primary_beta(self, layer, L, settings)
