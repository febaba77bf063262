"""The verdicts of a comparison (analysis/studies/compare.py), and the family that holds
them: the primary β's Δ of every pair at every shared L (`PrimaryDelta`, p from t with Welch's
degrees of freedom), the window mode density's Δ (`DensityDelta`), and `comparison_family`,
which enters them with the depth and memory differences and each model's tests against its
nulls, Holm-corrects the lot and returns the comparison with every p as counted.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from analysis._format import estimator_words, t_method
from analysis.fit.multiplicity import Family, quantile, welch_dof
from analysis.fit.resampling import difference_interval, difference_law, verdict
from analysis.fit.window import window_density
from analysis.spectrum.observables import token_rate_rows
from analysis.studies.estimates import Estimate, primary_beta
from sweep.format.settings import MODES

@dataclass(frozen=True)
class DensityDelta:
    """Δ of the window mode density (stable modes per token in the window) between two models
    at their representative layers and the shared L, with the distribution its p comes from."""
    a: str
    b: str
    layer_a: int
    layer_b: int
    L: int
    modes: str
    delta: float
    lo: float
    hi: float
    level: float
    law: dict = field(repr=False, default_factory=dict)    # resampling.difference_law
    units: tuple = ()
    p_adjusted: float = float("nan")
    p_method: str = ""

    @property
    def verdict(self) -> str:
        return verdict(self.lo, self.hi, self.level, self.p_adjusted)

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "layer_a": self.layer_a, "layer_b": self.layer_b,
                "L": self.L, "modes": self.modes, "delta_density": self.delta,
                "ci": [self.lo, self.hi], "units": list(self.units), "level": self.level,
                "p_adjusted": self.p_adjusted, "p_method": self.p_method, "verdict": self.verdict}


def density_deltas(sides, stores, settings, primary) -> list:
    """DensityDelta of every pair (the primary's mode count), each model resampled as its β."""
    dens = [window_density(*token_rate_rows(st, s.layer, s.L, skip=settings.skip_positions)[primary.modes],
                           settings.window, settings.n_boot, settings.level, settings.seed + i)
            for i, (s, st) in enumerate(zip(sides, stores))]
    out = []
    for i, (a, x) in enumerate(zip(sides, dens)):
        for b, y in zip(sides[i + 1:], dens[i + 1:]):
            if x.resampling is None or y.resampling is None:
                continue
            args = (x.value, x.reps, x.resampling, y.value, y.reps, y.resampling, settings.level)
            out.append(DensityDelta(a.name, b.name, a.layer, b.layer, a.L, primary.modes,
                                    *difference_interval(*args), settings.level,
                                    difference_law(*args), (x.unit, y.unit)))
    return out


@dataclass(frozen=True)
class PrimaryDelta:
    """Δβ of the primary estimator between two models at one L (representative layers): each
    side's interval read as se = half-width / z, se_Δ² = se_a² + se_b² (independent draws)."""
    a: str
    b: str
    L: int
    layer_a: int
    layer_b: int
    beta_a: Estimate
    beta_b: Estimate
    level: float
    p_raw: float = float("nan")
    p_adjusted: float = float("nan")

    @property
    def delta(self) -> float:
        return self.beta_a.value - self.beta_b.value

    @property
    def dof(self) -> float:
        """Welch–Satterthwaite from each side's own degrees of freedom (inf: normal)."""
        a, b = self.beta_a, self.beta_b
        return welch_dof(a.se(self.level), a.dof, b.se(self.level), b.dof)

    @property
    def ci(self) -> tuple:
        se = (self.beta_a.se(self.level) ** 2 + self.beta_b.se(self.level) ** 2) ** 0.5
        q = quantile(self.level, self.dof)
        return self.delta - q * se, self.delta + q * se

    @property
    def p_method(self) -> str:
        return t_method(self.dof)

    @property
    def verdict(self) -> str:
        return verdict(*self.ci, self.level, self.p_adjusted)

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "L": self.L, "layer_a": self.layer_a,
                "layer_b": self.layer_b, "beta_a": vars(self.beta_a),
                "beta_b": vars(self.beta_b), "delta_beta": self.delta, "ci": list(self.ci),
                "p_raw": self.p_raw, "p_method": self.p_method, "p_adjusted": self.p_adjusted,
                "level": self.level, "verdict": self.verdict}


def primary_deltas(sides, stores, settings, primary) -> list:
    """PrimaryDelta of every pair at every shared L, at each model's representative layer."""
    betas = [{L: primary_beta(st, s.layer, L, dataclasses.replace(settings, seed=settings.seed + i),
                              primary) for L in s.by_length[MODES[0]]}
             for i, (s, st) in enumerate(zip(sides, stores))]
    return [PrimaryDelta(a.name, b.name, L, a.layer, b.layer, betas[i][L], betas[j][L], settings.level)
            for i, a in enumerate(sides) for j, b in enumerate(sides) if j > i
            for L in a.by_length[MODES[0]] if betas[i][L] is not None and betas[j][L] is not None]


def comparison_family(c, label):
    """Comparison `c` (compare.py) counted: its family (the primary Δβ of every pair and L, the
    window mode density's Δ, the depth and memory differences, each model's observables
    against its nulls), Holm-corrected, and a copy of `c` whose every test carries its raw
    and adjusted p from that family."""
    nulls = c.nulls
    obs = {o.observable for ns in nulls.values() for o in ns.comparisons}
    kinds = {o.kind for ns in nulls.values() for o in ns.comparisons}
    differences = [d for d in (*c.depth_deltas, *c.memory_deltas) if np.isfinite(d.delta)]
    density = [d for d in c.density_deltas if np.isfinite(d.delta)]
    entries = [(f"{c.beta_word} {d.a} − {d.b}, layers {d.layer_a}/{d.layer_b}, L = {d.L} "
                f"({estimator_words(c.primary)})", d.delta, *d.ci, {"dof": d.dof})
               for d in c.primary_deltas]
    entries += [(f"Δ window mode density {d.a} − {d.b}, layers {d.layer_a}/{d.layer_b}, L = "
                 f"{d.L} ({d.modes} modes per token in the window)", d.delta, d.lo, d.hi,
                 {"dof": d.law["dof"]} if d.law["method"] == "t" else
                 {"replicates": d.law["replicates"], "unit": " / ".join(sorted(set(d.units)))})
                for d in density]
    # a difference not taken (laws differ, a law rejected): no row
    entries += [(difference_name(d), d.delta, d.lo, d.hi, difference_replicates_of(c, d))
                for d in differences]
    for ns in nulls.values():
        entries += ns.entries()
    fam = Family.counted(label, {"model pairs": len(c.sides) * (len(c.sides) - 1) // 2,
                                 "lengths": len({d.L for d in c.primary_deltas}),
                                 "depth and memory differences": len(differences),
                                 "window mode density differences": len(c.density_deltas),
                                 "models with nulls": len(nulls),
                                 "observables against nulls": len(obs),
                                 "null kinds, each its own comparison": len(kinds)},
                         c.settings.level, entries)
    tests = iter(fam.tests)
    primary = [dataclasses.replace(d, p_raw=t.p_raw, p_adjusted=t.p_adjusted)
               for d, t in zip(c.primary_deltas, tests)]
    counted = {id(d): next(tests) for d in density}
    density_deltas = [dataclasses.replace(d, p_adjusted=counted[id(d)].p_adjusted,
                                          p_method=counted[id(d)].p_method)
                      if id(d) in counted else d for d in c.density_deltas]
    counted = {id(d): next(tests).p_adjusted for d in differences}
    # their own sections print the corrected verdict
    depth_deltas, memory_deltas = ([dataclasses.replace(d, p_adjusted=counted[id(d)])
                                    if id(d) in counted else d for d in ds]
                                   for ds in (c.depth_deltas, c.memory_deltas))
    counted_nulls = {n: ns.counted([next(tests) for _ in ns.comparisons], fam.m)
                     for n, ns in nulls.items()}
    return dataclasses.replace(c, primary_deltas=primary, density_deltas=density_deltas,
                               depth_deltas=depth_deltas, memory_deltas=memory_deltas,
                               nulls=counted_nulls, family=fam)


def difference_name(d) -> str:
    """A depth or memory difference as a family row: what, estimator, mode count, where."""
    if getattr(d, "what", None) == "beta":
        return (f"Δβ {d.a} − {d.b}: stack of s = {d.span} blocks (cumulative fit, {d.modes} "
                f"modes, every walked token)")
    if getattr(d, "what", None) == "top_lyapunov":
        return f"Δγ₁ {d.a} − {d.b}: top Lyapunov exponent (token mean, every walked token)"
    law = getattr(d, "preferred", ("?",))[0]
    return (f"Δ{d.what} {d.a} − {d.b}: token memory, the {law} fit's {d.what} (layers "
            f"{d.layer_a}/{d.layer_b})")


def difference_replicates_of(c, d) -> dict:
    """Family.add's keywords for a depth or memory difference: the distribution its interval
    was read from (resampling.difference_law): {dof} for a t interval (a jackknife over
    sequences), {replicates, unit} for a percentile one, for its p."""
    if getattr(d, "what", None) == "beta":
        x, y = c.depth[d.a].boots[d.modes][d.span], c.depth[d.b].boots[d.modes][d.span]
        pa, pb = (x.beta, x.betas, x.resampling), (y.beta, y.betas, y.resampling)
    elif getattr(d, "what", None) == "top_lyapunov":
        x, y = c.depth[d.a].top, c.depth[d.b].top
        pa, pb = (x.value, x.reps, x.resampling), (y.value, y.reps, y.resampling)
    else:
        fa, fb = c.memory[d.a].fits[d.layer_a], c.memory[d.b].fits[d.layer_b]
        la, lb = fa.laws[d.preferred[0]], fb.laws[d.preferred[1]]
        pa = (la.params[d.what], la.reps[d.what], fa.profile.resampling)
        pb = (lb.params[d.what], lb.reps[d.what], fb.profile.resampling)
        x, y = fa, fb
    law = difference_law(*pa, *pb, c.settings.level)
    if law["method"] == "t":
        return {"dof": law["dof"]}
    units = sorted({getattr(x, "unit", "?"), getattr(y, "unit", "?")})
    return {"replicates": law["replicates"], "unit": " / ".join(units)}
