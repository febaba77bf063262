"""fp32 − fp64 of every declared observable: one checkpoint swept in both precisions on the
same tokens, each observable read on both through the same measuring function, their
difference with its interval (docs/analysis.md, "Precision of a declared observable").

The pairs are studies/precision.py's (`precision_pairs`: two trained models of one checkpoint
in different dtypes that share a layer). Both sides see the same sequences and positions, so
with two or more sequences the difference is paired: its interval is t(S − 1) of the
per-sequence differences of the leave-one-out values (each sequence's own effect cancels);
with one, se² = se_32² + se_64² with Welch–Satterthwaite degrees of freedom
(studies/against.py, `difference`). The observables and layers are the store's declared ones
(its `study`), else every declarable observable at every layer the pair shares. Exploratory:
the difference and its interval, no verdict; a reader holds it against the declared Δ.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.io.store import Store, open_store
from analysis.studies.against import Difference, difference
from analysis.studies.declarable import DECLARABLE, Context, Measured, Tokens
from analysis.studies.positions import resolve_skip
from analysis.studies.precision import precision_pairs
from analysis.studies.primary import primary_of, representative, store_settings
from sweep.format.study import STUDY, Study
from sweep.format.variants import trained_models


@dataclass(frozen=True)
class PrecisionRow:
    observable: str
    layer: int
    tokens: Tokens
    fp64: Measured             # the reference (higher precision)
    fp32: Measured
    diff: Difference           # fp32 − fp64

    def to_dict(self) -> dict:
        return {"observable": self.observable, "layer": self.layer,
                "sequences": self.tokens.seqs, "positions": self.tokens.positions,
                "reference": self.fp64.to_dict(), "other": self.fp32.to_dict(),
                "difference": "other − reference", **self.diff.to_dict()}


@dataclass(frozen=True)
class PrecisionStudy:
    """Every declared observable of one precision pair (module docstring)."""
    reference: str
    other: str
    dtypes: tuple
    same_tokens: bool
    rows: tuple

    def to_dict(self) -> dict:
        return {"reference": self.reference, "other": self.other, "dtypes": list(self.dtypes),
                "same_tokens": self.same_tokens, "exploratory": True,
                "method": __doc__.split("\n\n")[1].replace("\n", " "),
                "rows": [r.to_dict() for r in self.rows]}


def _declared(st) -> tuple:
    """(observables, layers or None: every shared one, level or None: the settings')."""
    rec = st.root.attrs.get(STUDY)
    if not rec:
        return list(DECLARABLE), None, None
    study = Study.from_record(rec)
    return list(study.observables), list(study.layers), float(study.level)


def precision_study(store, settings=None) -> list:
    """[PrecisionStudy] of every precision pair of trained models in `store` (a path or Store)."""
    st = store if isinstance(store, Store) else open_store(store)
    observables, layers, level = _declared(st)
    stores = {n: st.model(n) for n in trained_models(st.root)}
    out = []
    for ref, other, _ in precision_pairs(stores):
        a, b = stores[ref], stores[other]
        s = resolve_skip(settings or store_settings(a), a).replace(level=level)
        shared = sorted(set(a.layers) & set(b.layers) & set(layers if layers is not None else a.layers))
        L = representative(a, settings=s)[1]
        S = min(a.n_seqs, b.n_seqs)
        same = all(np.array_equal(a.tokens(q), b.tokens(q)) for q in range(S))
        ctx = Context(s, primary_of(a, s))          # one estimator for both sides
        rows = []
        for layer in shared:
            tokens = Tokens(S, int(s.skip_positions),
                            int(min(L, a.layer_length[layer], b.layer_length[layer])))
            for obs in observables:
                fn = DECLARABLE[obs].measure
                x64, x32 = fn(a, layer, tokens, ctx), fn(b, layer, tokens, ctx)
                rows.append(PrecisionRow(obs, layer, tokens, x64, x32, difference(x32, x64, s.level)))
        out.append(PrecisionStudy(ref, other, (a.dtype, b.dtype), same, tuple(rows)))
    return out
