"""The declared study: exactly the family a store's root attribute `study` names, tested as one
Holm family at its level, every verdict from the rule table (docs/analysis.md, "The declared
study"; sweep/format/study.py for the declaration).

One row per declared test (observable, layer, kind) of every trained model with nulls: the
trained value and each null's on the tokens they share (the first sequences both swept, the
positions both hold, position 0 left out where the settings say so), Δ with its interval and p
(studies/against.py: paired on shared sequences when k ≥ 8, the rank p beside it when k ≥ 19),
and for an observable whose registry entry asks for it (`window_range`: β) the same test at
every window with one edge moved by window.FACTORS. The family's p of such a row is the largest
p over the windows where every side has enough data (an intersection-union test: "Δ ≠ 0 at
every window" is rejected only where each window rejects, Berger 1982) and 1 when Δ changes
sign between windows. Holm adjusts the family's p; a row whose Holm p clears the level is
"differs"; a β row that does not, but whose declared-window p clears the same family with the
other rows as they are, is "window-dependent"; a row below a minimum is "not enough data" and
is not counted. Everything the report prints outside these rows is exploratory (`is_declared`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from analysis.fit.enough import Enough
from analysis.fit.multiplicity import holm
from analysis.fit.window import FACTORS
from analysis.io.store import Store, open_store
from analysis.studies import verdicts
from analysis.studies.against import NullTest, null_test
from analysis.studies.declarable import DECLARABLE, Context, Measured, Tokens
from analysis.studies.positions import bos_rule, resolve_skip
from analysis.studies.primary import primary_of, representative, store_settings
from analysis.studies.quant_spread import QuantSpread, quant_spread
from sweep.format.study import HISTORY, STUDY, Study
from sweep.format.variants import families


@dataclass(frozen=True)
class WindowPoint:
    """One declared test read at a window with one edge moved by `factor`."""
    edge: str                  # "lo" | "hi"
    factor: float
    window: tuple
    trained: Measured
    nulls: dict
    test: NullTest

    def to_dict(self) -> dict:
        return {"edge": self.edge, "factor": self.factor, "window": list(self.window),
                "trained": self.trained.to_dict(),
                "nulls": {n: m.to_dict() for n, m in self.nulls.items()}, **self.test.to_dict()}


@dataclass(frozen=True)
class StudyRow:
    """One declared test (module docstring)."""
    model: str
    observable: str
    label: str
    layer: int
    kind: str
    tokens: Tokens
    trained: Measured
    nulls: dict                # {null name: Measured}
    test: NullTest
    level: float
    windows: tuple = ()        # (WindowPoint,) for a window_range observable
    quantization: QuantSpread | None = None
    p_holm: float = np.nan
    code: str = verdicts.SHORT

    @property
    def windows_tested(self) -> list:
        return [w for w in self.windows if np.isfinite(w.test.p)]

    @property
    def p_family(self) -> float:
        """The p this row enters the family with: its own, or the largest over the windows."""
        if not self.windows or not np.isfinite(self.test.p):
            return self.test.p
        tested = [self.test, *(w.test for w in self.windows_tested)]
        if len({np.sign(t.delta) for t in tested}) > 1:
            return 1.0                   # Δ changes sign as an edge moves
        return float(max(t.p for t in tested))

    @property
    def check(self) -> Enough:
        return self.test.check

    def as_row(self) -> dict:
        """The fields the rule table reads (verdicts.py)."""
        return {"kind": self.kind, "delta": self.test.delta, "level": self.level,
                "p_holm": self.p_holm, "p_method": self.test.p_method, "code": self.code,
                "check": self.check.to_dict(), "label": self.label, "layer": self.layer,
                "observable": self.observable}

    def to_dict(self) -> dict:
        t = self.test
        return {**self.as_row(), "model": self.model, "sequences": self.tokens.seqs,
                "positions": self.tokens.positions, "trained": self.trained.to_dict(),
                "nulls": {n: m.to_dict() for n, m in self.nulls.items()},
                "null_mean": t.null_mean, "null_sd": t.null_sd, "n_nulls": len(self.nulls),
                "nulls_used": t.k,
                "delta": t.delta, "ci": [t.lo, t.hi], "p": t.p, "p_method": t.p_method,
                "paired": t.paired, "rank": t.rank, "p_rank": t.p_rank,
                "p_family": self.p_family, "verdict": self.code,
                "resampled": f"{self.trained.unit or '–'}; the nulls' seeds (k = {t.k})",
                "windows": [w.to_dict() for w in self.windows],
                "quantization": self.quantization.to_dict() if self.quantization else None}


@dataclass(frozen=True)
class StudyResult:
    """The declared family of one store, tested (module docstring)."""
    declaration: dict
    id: str
    declared: str
    after_data: bool
    history: tuple
    level: float
    rows: tuple
    positions_dropped: dict = field(default_factory=dict)

    @property
    def status(self) -> str:
        return "declared after the data" if self.after_data else "declared before the data"

    @property
    def changed(self) -> bool:
        """Recorded after the store held data of a declared layer, or replaced since."""
        return self.after_data or len({h.get("id") for h in self.history}) > 1

    @property
    def m(self) -> int:
        return int(sum(np.isfinite(r.p_family) for r in self.rows))

    def groups(self) -> dict:
        """{(model, observable, layer): [StudyRow]} in the family's order."""
        out = {}
        for r in self.rows:
            out.setdefault((r.model, r.observable, r.layer), []).append(r)
        return out

    def verdicts(self) -> list:
        """[{model, observable, layer, category, sentence}], one per observable and layer."""
        return [{"model": m, "observable": o, "layer": ly,
                 "category": verdicts.category([r.as_row() for r in rows]),
                 "sentence": verdicts.sentence([r.as_row() for r in rows], self.status)}
                for (m, o, ly), rows in self.groups().items()]

    def is_declared(self, observable, layer, kind) -> bool:
        """Whether (observable, layer, kind) is a declared test; every other number is
        exploratory and is printed without a verdict word."""
        return any((r.observable, r.layer, r.kind) == (observable, layer, kind) for r in self.rows)

    def to_dict(self) -> dict:
        return {"declaration": self.declaration, "id": self.id, "declared": self.declared,
                "after_data": self.after_data, "status": self.status, "changed": self.changed,
                "history": list(self.history), "level": self.level, "m": self.m,
                "correction": "Holm step-down over every declared test with enough data",
                "window_factors": list(FACTORS), "positions_dropped": self.positions_dropped,
                "method": __doc__.split("\n\n")[1].replace("\n", " "),
                "rows": [r.to_dict() for r in self.rows], "verdicts": self.verdicts()}


def declared_study(store, settings=None) -> StudyResult | None:
    """The declared family of `store` (a path or an open Store) tested; None when the store
    records no `study`. `settings`: the analysis settings (default: the store's recorded ones);
    the study's own level replaces theirs."""
    st = store if isinstance(store, Store) else open_store(store)
    rec = st.root.attrs.get(STUDY)
    if not rec:
        return None
    study = Study.from_record(rec)
    settings = resolve_skip(settings or store_settings(st), st).replace(level=study.level)
    rows, by_model = [], families(st.root, "null")
    for model in [m for m, kinds in by_model.items() if kinds] or list(by_model):
        trained, kinds = st.model(model), by_model[model]
        ctx = Context(settings, primary_of(trained, settings))
        members = [n for names in families(st.root, "ensemble").get(model, {}).values() for n in names]
        rows += [_row(trained, o, layer, kind, kinds.get(kind, []), members, ctx)
                 for o, layer, kind in study.tests()]
    return StudyResult(study.declaration(), study.id, str(rec.get("declared", "")),
                       bool(rec.get("after_data", False)), tuple(st.root.attrs.get(HISTORY, [])),
                       float(study.level), tuple(_family(rows)), bos_rule(st, settings).to_dict())


def _tokens(st, layer, nulls, settings) -> Tokens:
    """The tokens the trained model and every null of the kind hold at `layer`."""
    L = representative(st, settings=settings)[1]
    models = [st, *(st.model(n) for n in nulls)]
    stop = min(L, *(m.layer_length.get(layer, 0) for m in models))
    return Tokens(min(m.n_seqs for m in models), int(settings.skip_positions), int(stop))


def _measure(obs, models, layer, tokens, ctx) -> dict:
    """{name: Measured} of every model group named in `models` (a dict name -> Store)."""
    fn = DECLARABLE[obs].measure
    return {name: fn(g, layer, tokens, ctx) for name, g in models.items()}


def _row(st, obs, layer, kind, nulls, members, ctx) -> StudyRow:
    entry = DECLARABLE[obs]
    level = ctx.settings.level
    if layer not in st.layers or any(layer not in st.model(n).layers for n in nulls):
        missing = Measured.missing(Enough("layer", 0, 1, f"swept models at layer {layer}"), "")
        return StudyRow(st.name, obs, entry.label, layer, kind, Tokens(0, 0, 0), missing, {},
                        null_test(missing, {}, level), level)
    tokens = _tokens(st, layer, nulls, ctx.settings)
    groups = {n: st.model(n) for n in nulls}
    trained = entry.measure(st, layer, tokens, ctx)
    by_null = _measure(obs, groups, layer, tokens, ctx)
    test = null_test(trained, by_null, level)
    moves = entry.window_range and test.check.ok      # a short declared window has no range to test
    windows = tuple(_windows(st, obs, layer, tokens, groups, ctx)) if moves else ()
    quant = None
    if members and np.isfinite(test.delta):
        q_tokens = dataclasses.replace(tokens, seqs=min(tokens.seqs, *(st.model(m).n_seqs for m in members)))
        quant = quant_spread(_measure(obs, {m: st.model(m) for m in members}, layer, q_tokens, ctx),
                             q_tokens.seqs, level, test.delta)
    return StudyRow(st.name, obs, entry.label, layer, kind, tokens, trained, by_null, test, level,
                    windows, quant)


def moved_windows(window) -> list:
    """[(edge, factor, window)]: each edge of `window` moved by every factor ≠ 1 of FACTORS, the
    other edge fixed, where the window stays non-empty."""
    lo, hi = window
    out = []
    for edge in ("lo", "hi"):
        for f in FACTORS:
            w = (lo * f, hi) if edge == "lo" else (lo, hi * f)
            if f != 1 and w[0] < w[1]:
                out.append((edge, float(f), w))
    return out


def _windows(st, obs, layer, tokens, groups, ctx) -> list:
    out = []
    for edge, f, w in moved_windows(ctx.fit_window):
        moved = ctx.moved(w)
        trained = DECLARABLE[obs].measure(st, layer, tokens, moved)
        nulls = _measure(obs, groups, layer, tokens, moved)
        out.append(WindowPoint(edge, f, w, trained, nulls, null_test(trained, nulls, ctx.settings.level)))
    return out


def _family(rows) -> list:
    """Holm over the rows' family p, then each row's code (module docstring)."""
    alpha = 1 - rows[0].level if rows else 0.0
    adjusted = holm([r.p_family for r in rows])
    declared_only = holm([r.test.p for r in rows])     # β at its declared window alone
    out = []
    for r, p, p_declared in zip(rows, adjusted, declared_only):
        if not np.isfinite(p):
            code = verdicts.SHORT
        elif p < alpha:
            code = verdicts.DIFFERS
        elif r.windows and p_declared < alpha:
            code = verdicts.WINDOW
        else:
            code = verdicts.NONE
        out.append(dataclasses.replace(r, p_holm=float(p), code=code))
    return out
