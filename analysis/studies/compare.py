"""Do two models' β agree? β of several models on shared axes, and Δβ of every pair with a
CI (`tdos compare`, and the "Across models" section of `tdos analyze`).

A model is one group of one store ("STORE:MODEL"). The verdicts are those of the primary
estimator (`PrimaryDelta`, Holm-corrected in the comparison's family, p from t with Welch's
degrees of freedom). As diagnostics, for each model: β of the cumulative fit with its
bootstrap CI (bootstrap.py) against L at its representative
layer, and against relative depth (layer / (layers − 1)) at the shared L, under both mode
counts. For each pair, at every L both models have and at every relative depth they share
(each layer of the model with fewer layers against the other's nearest one):

    Δβ = β_a − β_b,  replicates Δβ* = Δβ + c_a (β_a* − β_a) − c_b (β_b* − β_b)

β_a* and β_b* are each model's own bootstrap replicates (its own units: sequences or
circular blocks of its own k), drawn independently (model i uses seed + i), and c is each
model's stretch of its percentile interval (variance bias and Student's t, resampling.py),
so a single model's interval is reproduced when the other has no spread. The CI is the
percentile interval of Δβ*, read alone (uncorrected): "no difference shown at 90 %" when it
holds 0, "CI excludes 0 (uncorrected)" otherwise; depth and memory differences enter the
family with the bootstrap p of these same replicates (multiplicity.p_from_replicates). Two
models fed the same text are positively correlated through it, which
independent draws ignore: their Δβ interval is then conservative (too wide).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

import numpy as np

from analysis.fit.multiplicity import Family
from analysis.fit.resampling import difference_interval, verdict
from analysis.fit.gof import power_law_gof
from analysis.io.aggregate import aggregate
from analysis.spectrum.observables import memory_kernel_from_hist, tdos, token_rate_rows
from analysis.spectrum.rates import resolution_floor
from analysis.io.store import StoreError, open_store
from analysis.studies.compare_family import comparison_family, density_deltas, primary_deltas
from analysis.studies.depth import compare_depth, depth_study
from analysis.studies.memory import compare_memory, memory_study
from analysis.studies.nulls import null_study
from analysis.studies.primary import MAX_L, representative
from analysis.studies.rows import bootstrap_from_agg
from analysis.studies.tables import default_lengths
from sweep.format.variants import trained_models
from sweep.format.settings import MODES, Settings


@dataclass(frozen=True)
class DeltaBeta:
    """Δβ = β_a − β_b at one point, with its CI and verdict."""
    a: str
    b: str
    modes: str
    L: int
    layer_a: int
    layer_b: int
    delta: float
    lo: float
    hi: float
    level: float
    units: tuple               # (what a's bootstrap resampled, what b's did)
    along: str = "L"           # "L": representative layers, this L; "depth": matched layers, shared L

    @property
    def verdict(self) -> str:
        return verdict(self.lo, self.hi, self.level)

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "modes": self.modes, "L": self.L,
                "layer_a": self.layer_a, "layer_b": self.layer_b, "delta_beta": self.delta,
                "ci": [self.lo, self.hi], "level": self.level, "verdict": self.verdict,
                "units": list(self.units), "along": self.along}


def delta_beta_interval(boot_a, boot_b, level=0.9) -> tuple:
    """(Δβ, lo, hi) from two BootstrapIR results (module docstring)."""
    return difference_interval(boot_a.beta, boot_a.betas, boot_a.resampling,
                               boot_b.beta, boot_b.betas, boot_b.resampling, level)


def compare_boots(boot_a, boot_b, level=0.9, **where) -> DeltaBeta:
    """DeltaBeta of two BootstrapIR results; `where`: a, b, modes, L, layer_a, layer_b."""
    d, lo, hi = delta_beta_interval(boot_a, boot_b, level)
    return DeltaBeta(delta=d, lo=lo, hi=hi, level=level, units=(boot_a.unit, boot_b.unit), **where)


@dataclass(frozen=True)
class ModelSide:
    """One model's β points: {modes: {key: BootstrapIR}} against L and against layer."""
    label: str                 # "STORE:MODEL" as given, or the group name
    name: str
    store: str
    arch: str
    n_layers: int              # the model's layer count (relative depth = layer / (n − 1))
    layer: int                 # representative layer
    L: int                     # the shared L of the depth points
    by_length: dict = field(default_factory=dict)
    by_layer: dict = field(default_factory=dict)
    floor: tuple = (0.0, "")   # (λ, why): all-stable modes below λ left out (fp32 resolution)

    def depth(self, layer) -> float:
        return layer / max(self.n_layers - 1, 1)


def model_layers(st) -> int:
    """The checkpoint's layer count from its recorded config, else the stored layers'."""
    cfg = st.identity.get("config") or {}
    n = cfg.get("num_hidden_layers") or cfg.get("n_layer")
    return int(n) if n else max(st.layers) + 1


def parse_source(text) -> list:
    """"STORE" or "STORE:MODEL" → [(store path, model or None)]."""
    text = os.fspath(text)
    if ":" in text and not os.path.exists(text):
        path, model = text.rsplit(":", 1)
        return [(path, model)]
    return [(text, None)]


def resolve(sources) -> list:
    """[(label, store path, model name)] for every model named or held by each source."""
    out = []
    for src in sources:
        for path, model in parse_source(src):
            st = open_store(path, model)
            names = [model] if model else trained_models(st.root)
            out += [(f"{path}:{n}" if len(names) > 1 or model else path, path, n) for n in names]
    labels = [o[2] for o in out]
    return [(lab if labels.count(n) > 1 else n, p, n) for lab, p, n in out]


def _boot(agg, layer, L, modes, settings, seed, floor=(0.0, "")):
    """β's bootstrap of one count; the all-stable count above `floor` (as Table I counts it)."""
    boot, _ = bootstrap_from_agg(agg, layer, L, modes, settings.window, settings.n_boot,
                                 settings.level, seed,
                                 floor=floor[0] if modes == "all-stable" else 0.0)
    return boot


def shared_lengths(stores, layers, settings) -> list:
    """Table I lengths every model has at its representative layer."""
    sets = [set(default_lengths(st.layer_length[ly], settings.lengths)) for st, ly in zip(stores, layers)]
    return sorted(set.intersection(*sets))


def model_sides(resolved, settings) -> list:
    """ModelSide of every resolved model, each resampled with its own seed."""
    stores = [open_store(p, n) for _, p, n in resolved]
    layers = [representative(st, settings=settings)[0] for st in stores]   # as `tdos analyze`'s
    lengths = shared_lengths(stores, layers, settings)
    if not lengths:
        raise StoreError("the models share no length L at their representative layers — "
                         "choose --lengths that every model has")
    L = max(x for x in lengths if x <= MAX_L) if min(lengths) <= MAX_L else lengths[0]
    sides = []
    for i, ((label, path, name), st, ly) in enumerate(zip(resolved, stores, layers)):
        agg = aggregate(path).model(name).skipping(settings.skip_positions)
        seed, floor = settings.seed + i, resolution_floor(st.dtype)
        by_length = {m: {x: _boot(agg, ly, x, m, settings, seed, floor) for x in lengths}
                     for m in MODES}
        by_layer = {m: {y: _boot(agg, y, min(L, st.layer_length[y]), m, settings, seed, floor)
                        for y in st.layers} for m in MODES}
        sides.append(ModelSide(label, name, path, st.arch, model_layers(st), ly, L, by_length,
                               by_layer, floor))
    return sides


def matched_layers(a: ModelSide, b: ModelSide) -> list:
    """(layer_a, layer_b) pairs at matched relative depth: each layer of the model with fewer
    stored layers against the other's nearest."""
    la, lb = list(a.by_layer[MODES[0]]), list(b.by_layer[MODES[0]])
    if len(la) <= len(lb):
        return [(x, min(lb, key=lambda y: abs(b.depth(y) - a.depth(x)))) for x in la]
    return [(min(la, key=lambda x: abs(a.depth(x) - b.depth(y))), y) for y in lb]


def pair_deltas(a: ModelSide, b: ModelSide, level) -> list:
    """Every DeltaBeta of one pair: against L (representative layers), then against depth."""
    out = []
    for m in MODES:
        for L in a.by_length[m]:
            out.append(compare_boots(a.by_length[m][L], b.by_length[m][L], level, a=a.name,
                                     b=b.name, modes=m, L=L, layer_a=a.layer, layer_b=b.layer))
        for x, y in matched_layers(a, b):
            out.append(compare_boots(a.by_layer[m][x], b.by_layer[m][y], level, a=a.name,
                                     b=b.name, modes=m, L=a.L, layer_a=x, layer_b=y, along="depth"))
    return out


@dataclass(frozen=True)
class Comparison:
    """β of several models and Δβ of every pair (module docstring), every test counted in
    `family` (compare_family.comparison_family)."""
    sides: list
    deltas: list               # DeltaBeta, every pair, both counts, against L and depth
    settings: Settings
    depth: dict = field(default_factory=dict)          # {name: DepthStudy} when all swept `depth:`
    depth_deltas: list = field(default_factory=list)   # depth.DepthDelta of every pair
    memory: dict = field(default_factory=dict)         # {name: MemoryStudy} when all swept `memory:`
    memory_deltas: list = field(default_factory=list)  # studies.memory.MemoryDelta of every pair
    primary: object = None                             # settings.Primary of the verdicts
    primary_deltas: list = field(default_factory=list)  # PrimaryDelta of every pair and shared L
    density_deltas: list = field(default_factory=list)  # DensityDelta of every pair
    gof_p: dict = field(default_factory=dict)          # {name: power law's GOF p, primary count}
    nulls: dict = field(default_factory=dict)          # {name: NullStudy} of models with nulls
    family: Family | None = None                       # the tests counted and Holm-corrected
    spectra: object = None                             # ComparisonSpectra: what the figures draw

    @property
    def memory_layers(self) -> dict:
        """{name: representative layer}: where the memory comparison is made."""
        return {s.name: s.layer for s in self.sides}

    @property
    def beta_word(self) -> str:
        """"Δβ", or "Δ window slope β" when a side's power law is rejected (p < 1 − level)."""
        rejected = any(p < 1 - self.settings.level for p in self.gof_p.values())
        return "Δ window slope β" if rejected else "Δβ"

    def to_dict(self) -> dict:
        def pts(d):
            return [{"key": k, "beta": v.beta, "ci": [v.lo, v.hi], "unit": v.unit}
                    for k, v in d.items()]
        return {"settings": self.settings.to_dict(), "method": __doc__.split("\n\n")[1],
                "models": [{"label": s.label, "name": s.name, "store": s.store,
                            "arch": s.arch, "n_layers": s.n_layers, "layer": s.layer, "L": s.L,
                            "beta_vs_L": {m: pts(s.by_length[m]) for m in MODES},
                            "beta_vs_layer": {m: pts(s.by_layer[m]) for m in MODES},
                            "all_stable_floor": {"lambda": s.floor[0], "why": s.floor[1]}}
                           for s in self.sides],
                "primary": self.primary.describe() if self.primary else None,
                "primary_pairs": [d.to_dict() for d in self.primary_deltas],
                "pairs": [d.to_dict() for d in self.deltas],          # diagnostics: cumulative fit, both counts
                "density_pairs": [d.to_dict() for d in self.density_deltas],
                "gof_p": self.gof_p, "beta_tests_read_as": "window-slope tests"
                if self.beta_word != "Δβ" else "exponent tests",
                "nulls": {n: v.to_dict() for n, v in self.nulls.items()},
                "family": self.family.to_dict() if self.family else None,
                **({"depth": {"models": {n: d.to_dict() for n, d in self.depth.items()},
                              "pairs": [d.to_dict() for d in self.depth_deltas]}}
                   if self.depth else {}),
                **({"memory": {"models": {n: m.to_dict() for n, m in self.memory.items()},
                               "pairs": [d.to_dict() for d in self.memory_deltas]}}
                   if self.memory else {})}


def compare_models(sources, settings: Settings | None = None, nulls: dict | None = None,
                   label: str | None = None) -> Comparison:
    """The comparison of the models in `sources` ("STORE" or "STORE:MODEL" each).

    `nulls`: {name: NullStudy} the caller already made for the models with nulls (`tdos
    analyze` makes each at the model's own representative layer, L and primary β); they are
    the comparison's, entered once in its family. None: each side's study is made here, at its
    representative layer, the shared L and the comparison's primary. `label` names the family
    (default "tdos compare of N models")."""
    settings = settings or Settings()
    resolved = resolve(sources)
    if len(resolved) < 2:
        raise StoreError(f"compare needs at least two models; {', '.join(map(str, sources))} "
                         f"hold(s) {len(resolved)}")
    sides = model_sides(resolved, settings)
    stores = [open_store(p, n) for _, p, n in resolved]
    primary = settings.primary_for(False)
    depth = memory = {}
    if all(st.depth for st in stores):           # each model resampled with its own seed
        depth = {s.name: depth_study(st, dataclasses.replace(settings, seed=settings.seed + i))
                 for i, (s, st) in enumerate(zip(sides, stores))}
    if all(st.group.attrs.get("memory") for st in stores):
        # each model's replicates seeded by the model itself, as in its own report section
        memory = {s.name: memory_study(st, settings) for s, st in zip(sides, stores)}
    deltas = [d for i, a in enumerate(sides) for b in sides[i + 1:]
              for d in pair_deltas(a, b, settings.level)]
    c = Comparison(
        sides, deltas, settings, depth=depth,
        depth_deltas=compare_depth(depth, settings.level) if depth else [], memory=memory,
        memory_deltas=compare_memory(memory, {s.name: s.layer for s in sides}, settings.level)
        if memory else [], primary=primary,
        primary_deltas=primary_deltas(sides, stores, settings, primary),
        density_deltas=density_deltas(sides, stores, settings, primary),
        gof_p={s.name: _gof_p(st, s, settings, primary) for s, st in zip(sides, stores)},
        nulls=_null_studies(sides, stores, settings, primary) if nulls is None else dict(nulls),
        spectra=comparison_spectra(sides, settings))
    return comparison_family(c, label or f"tdos compare of {len(sides)} models")


def _gof_p(st, side, settings, primary) -> float:
    """The power law's Monte-Carlo GOF p over the window, primary count, (layer, L) of a side."""
    rates, _ = token_rate_rows(st, side.layer, side.L, skip=settings.skip_positions)[primary.modes]
    flat = rates[np.isfinite(rates)]
    return power_law_gof(flat, settings.window, n_sims=settings.n_boot, seed=settings.seed).p_value


def _null_studies(sides, stores, settings, primary) -> dict:
    """{name: NullStudy} of each side with nulls, at its representative layer and the shared L."""
    return {s.name: ns for s, st in zip(sides, stores)
            if (ns := null_study(st, s.layer, s.L, settings, primary)) is not None}


@dataclass(frozen=True)
class ComparisonSpectra:
    """What compare_tdos.png and compare_kernel.png draw: the first two models' normalised
    ρ_block at matched relative depth (`panels`, one per depth in `depths`: [(label,
    Spectrum)]) and every model's K(t) at its representative layer (`kernels`)."""
    panels: list
    depths: list
    kernels: list
    L: int
    modes: str
    window: tuple


def comparison_spectra(sides, settings) -> ComparisonSpectra:
    """The spectra of a comparison's figures, from each model's aggregate."""
    s = settings
    aggs = [aggregate(x.store).model(x.name).skipping(s.skip_positions) for x in sides]
    a, b = sides[0], sides[1]
    pairs = matched_layers(a, b)

    def length(g, layer):
        return int(g.g.attrs["layer_length"][g.layers.index(layer)])

    panels = [[(x.label, tdos(g, ly, min(x.L, length(g, ly)), modes=s.modes))
               for x, g, ly in zip((a, b), aggs[:2], pair)] for pair in pairs]
    kernels = [(x.label, memory_kernel_from_hist(tdos(g, x.layer, x.L, modes=s.modes),
                                                 label=f"{x.label}, layer {x.layer}"))
               for x, g in zip(sides, aggs)]
    return ComparisonSpectra(panels, [a.depth(p[0]) for p in pairs], kernels, a.L, s.modes,
                             tuple(s.window))
