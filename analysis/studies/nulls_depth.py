"""The primary β and the window mode density against the nulls at every swept layer: what a
model's infrared organisation looks like across depth, read against weights that learned
nothing (docs/analysis.md, "Reading a result against its null").

studies/nulls.py compares every observable at the representative layer. Across depth the
question is narrower and asked at every layer the trained model and all its nulls share: do
the window slope β (the primary estimator) and the window mode density (stable modes per
token in the window) differ from each null kind there? Each (layer, observable, kind) is one
NullComparison, built exactly as the representative layer's (the trained value on the nulls'
sequences and positions, Δ ± t_{k−1} se_Δ, p from that t), and all of them form one family
of their own, Holm-adjusted together: the representative layer's family (the report's) is
left as it is, and no layer's verdict escapes the count of the layers beside it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.fit.multiplicity import Family
from analysis.studies.estimates import (FirstSequences, Label, density_label, key_of,
                                        primary_beta, window_density_of)
from analysis.studies.nulls import NullComparison, by_kind, slope_label
from sweep.format.settings import Primary


@dataclass(frozen=True)
class DepthNullStudy:
    """β and the window mode density against each null kind at every shared layer."""
    model: str
    L: int                     # the representative length each layer is read at (≤ its length)
    layers: list
    rows: tuple = ()           # ((layer, NullComparison), ...), p counted in `family`
    family: Family | None = None

    def to_dict(self) -> dict:
        return {"model": self.model, "L": self.L, "layers": self.layers,
                "method": __doc__.split("\n\n")[1].replace("\n", " "),
                "family": self.family.to_dict() if self.family else None,
                "rows": [{"layer": layer, **c.to_dict()} for layer, c in self.rows]}


def _observables(st, layer, L, settings, primary: Primary) -> dict:
    out = {Label(f"β ({primary.name})", "beta"): primary_beta(st, layer, L, settings, primary),
           density_label(primary): window_density_of(st, layer, L, settings, primary)}
    return {k: v for k, v in out.items() if v is not None and np.isfinite(v.value)}


def shared_layers(st) -> list:
    """The trained model's layers that every one of its nulls swept too."""
    return [ly for ly in st.layers if all(ly in st.model(n).layers for n in st.nulls)]


def depth_null_study(st, L, settings, primary: Primary, window_slope: bool) -> DepthNullStudy | None:
    """Every shared layer's β and window mode density against each null kind (module
    docstring); None without nulls at two or more layers. `window_slope`: the power law is
    rejected at the representative layer, so β rows are named window-slope tests."""
    layers = shared_layers(st) if st.nulls else []
    if len(layers) < 2:
        return None
    kinds, rows = by_kind(st), []
    for layer in layers:
        trained_on = {}             # (sequences, L): the trained observables there, read once
        for kind, names in kinds.items():
            S = min(st.n_seqs, *(st.model(n).n_seqs for n in names))
            Lk = min(L, st.layer_length[layer], *(st.model(n).layer_length.get(layer, L) for n in names))
            if (S, Lk) not in trained_on:
                trained_on[S, Lk] = _observables(FirstSequences(st, S), layer, Lk, settings, primary)
            trained = trained_on[S, Lk]
            by_null = {n: _observables(FirstSequences(st.model(n), S), layer, Lk, settings, primary)
                       for n in names}
            for name, est in trained.items():
                nulls = {n: obs[name] for n, obs in by_null.items() if name in obs}
                if nulls:
                    rows.append((layer, NullComparison(
                        st.name, slope_label(name, window_slope), est, nulls, settings.level,
                        kind, S, key=key_of(name))))
    family = Family.counted(
        f"{st.name}: β and window mode density against its nulls across depth",
        {"layers": len(layers), "observables": 2, "null kinds": len(kinds)}, settings.level,
        [(f"layer {layer}: {c.test_name()}", c.delta, c.lo, c.hi, {"dof": c.dof})
         for layer, c in rows])
    return DepthNullStudy(st.name, L, layers, tuple((layer, c.counted(t)) for (layer, c), t
                                                   in zip(rows, family.tests)), family)
