"""The `study:` section held against the rest of the config, before anything is computed: the
family it declares must be testable by the sweep that follows. Each field's own check is the
store format's (sweep/format/study.py, run when the section is built); here, what lies between
it and the models: every null kind it is tested against swept by every model with at least 2
seeds, cross-layer observables only with `depth:` (at load), and every declared layer swept by
every model (once the plan knows the layers: `layers: all` needs the checkpoint's depth).

The study decides no stored value, so it is no part of the store's fingerprint: a changed
declaration on an existing store is accepted, and the sweep records it (sweep/store/study.py).
"""
from __future__ import annotations

from collections import Counter

from sweep.errors import ConfigError
from sweep.format.study import NEEDS_DEPTH, Study

MIN_SEEDS = 2           # a null kind's mean and spread need two seeds at least


def check_study(study: Study | None, models, depth) -> None:
    """`models`: the ModelSpecs (names resolved); `depth`: the DepthConfig or None."""
    if study is None:
        return
    for o in study.observables:
        if o in NEEDS_DEPTH and depth is None:
            raise ConfigError(f"study.observables: {o!r} is measured on stacked blocks, which only "
                              f"a sweep with `depth:` computes — add e.g. `depth: {{spans: [2]}}`, "
                              f"or remove {o!r}")
    kinds = list(dict.fromkeys(k for o in study.observables for k in study.kinds(o)))
    for m in models:
        seeds = Counter(kind for kind, _ in (m.nulls.seeds() if m.nulls else ()))
        for kind in kinds:
            if seeds[kind] == 0:
                swept = ", ".join(f"{k} {n}" for k, n in seeds.items()) or "none"
                raise ConfigError(f"study.against: {m.name} sweeps no {kind} nulls (its nulls: "
                                  f"{swept}) — add `{kind}: 8` under {m.where}.nulls, or remove "
                                  f"{kind} from study.against")
            if seeds[kind] < MIN_SEEDS:
                raise ConfigError(f"study.against: {m.where}.nulls.{kind} is {seeds[kind]}, and a "
                                  f"test against {kind} needs at least {MIN_SEEDS} seeds — raise "
                                  f"it to {MIN_SEEDS} or more, or remove {kind} from study.against")


def check_study_layers(study: Study | None, swept) -> None:
    """`swept`: (ModelSpec, its swept layers) of every model of the plan: each declared layer
    must be among them."""
    if study is None:
        return
    for spec, layers in swept:
        missing = sorted(set(study.layers) - set(layers))
        if missing:
            where = f"{spec.where}.layers" if spec.layers is not None else "layers"
            raise ConfigError(f"study.layers: layer {missing[0]} is not swept for {spec.name} "
                              f"(swept: {', '.join(map(str, layers))}) — add it to {where}, or "
                              f"remove it from study.layers")
