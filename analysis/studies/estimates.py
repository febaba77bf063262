"""Each observable of one model group as an `Estimate`: its value, interval, what the
interval resampled, its degrees of freedom and the positions it read. What studies/nulls.py,
nulls_depth.py, ensemble.py and compare_family.py set side by side.

Observables, each skipped quietly when the store lacks it: the primary β (Settings.primary)
at the representative (layer, L); log ‖J_tt‖_F² and Henrici's non-normality of J_tt
averaged over tokens t < L at that layer; with `depth:`, the top finite-depth Lyapunov
exponent averaged over every walked token and the kernel's two ratios (ln of non-normality
and of cross-layer alignment, geometric means over tokens) at the run's first layer and
longest span; with `memory:`, the parameter of the law the trained model's profile prefers
at the representative layer (ξ, α or α₂), fitted by that same law in every null, and only
when the trained profile's law is not rejected. Each Estimate says which positions it read.
Per-token means get the resampling plan of resampling.py (sequences, or circular blocks of
tokens); the memory parameters their replicate intervals (memory.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.fit.enough import enough
from analysis.fit.multiplicity import quantile
from analysis.fit.resampling import resampling_for
from analysis.fit.window import bootstrap_mle, window_density
from analysis.io.aggregate import aggregate
from analysis.spectrum.observables import token_rate_rows
from analysis.spectrum.rates import floor_edge, resolution_floor
from analysis.studies.depth import kernel_points
from analysis.studies.memory import COMPARED, memory_profile
from analysis.studies.memory_laws import fit_memory
from analysis.studies.rows import bootstrap_from_agg
from sweep.format.settings import Primary


@dataclass
class Estimate:
    """One model's value of one observable, with its interval, what it resampled, the
    degrees of freedom its interval's quantile had (inf: normal) and the positions read."""
    value: float
    lo: float
    hi: float
    unit: str
    dof: float = np.inf
    positions: str = ""
    check: dict | None = None  # its minimum (fit/enough.py, Enough.to_dict), where it has one

    def se(self, level) -> float:
        if not np.isfinite(self.lo):
            return np.nan
        return float((self.hi - self.lo) / (2 * quantile(level, self.dof)))


class Label(str):
    """An observable's printed name that also says what it is (`key`: "beta", "density",
    "log_frobenius", …), so a reader picks a row by what it is, never by its label's words."""
    key: str

    def __new__(cls, text, key):
        s = super().__new__(cls, text)
        s.key = key
        return s


def density_label(primary) -> Label:
    return Label(f"window mode density ({primary.modes} modes per token in the window)", "density")


def key_of(label) -> str:
    """What an observable is, from its `Label` ("" for a plain string)."""
    return getattr(label, "key", "")


class FirstSequences:
    """Store `st` read through its first `n` sequences: the tokens its nulls ran on
    (`nulls.sequences`); every reader here iterates range(st.n_seqs)."""

    def __init__(self, st, n):
        self._st, self.n_seqs = st, int(n)

    def __getattr__(self, name):
        return getattr(self._st, name)


def interval_dof(interval) -> float:
    """The degrees of freedom an interval's quantile used (its plan's; inf when it says none)."""
    d = getattr(interval, "dof", None)
    if d is None:
        d = getattr(getattr(interval, "resampling", None), "dof", None)
    return float(d) if d is not None else np.inf


def window_density_of(st, layer, L, settings, primary: Primary) -> Estimate | None:
    """Stable modes per token in the fit window (window.window_density), the primary count."""
    rates, seq = token_rate_rows(st, layer, L, skip=settings.skip_positions)[primary.modes]
    if not len(rates):
        return None
    d = window_density(rates, seq, settings.window, settings.n_boot, settings.level, settings.seed)
    return Estimate(d.value, d.lo, d.hi, d.unit, d.dof, f"t < {L}",
                    enough("token_mean", len(rates)).to_dict())


def primary_beta(st, layer, L, settings, primary: Primary) -> Estimate | None:
    """The primary β of (layer, L) over st's sequences: the in-window MLE or the cumulative
    fit, its interval resampling tokens as Table I does."""
    where = f"t < {L}"
    if primary.estimator == "mle":
        rates, seq = token_rate_rows(st, layer, L, skip=settings.skip_positions)[primary.modes]
        if not len(rates):
            return None
        m = bootstrap_mle(rates, seq, settings.window, settings.n_boot, settings.level, settings.seed)
        return Estimate(m.beta, m.lo, m.hi, m.unit, interval_dof(m), where,
                        enough("beta", m.n_modes).to_dict())
    agg = aggregate(st.path, progress=None).model(st.name).skipping(settings.skip_positions)
    floor, why = resolution_floor(st.dtype) if primary.modes == "all-stable" else (0.0, "")
    b, _ = bootstrap_from_agg(agg, layer, L, primary.modes, settings.window, settings.n_boot,
                              settings.level, settings.seed, n_seqs=st.n_seqs, floor=floor)
    if why:                             # as Table I counts it, and said
        where += f", all-stable λ ≥ {floor_edge(floor)[0]:.3g} ({why})"
    return Estimate(b.beta, b.lo, b.hi, b.unit, interval_dof(b), where,
                    enough("beta", b.fit.n_modes).to_dict())


def token_mean(values, seq, settings, log=False, positions="") -> Estimate | None:
    """Mean over tokens of a per-token observable (log scale when `log`), its interval from
    the resampling plan of resampling.py (whole sequences, or circular blocks)."""
    v = np.asarray(values, np.float64)
    ok = np.isfinite(v) & ((v > 0) if log else True)
    v, seq = (np.log(v[ok]) if log else v[ok]), np.asarray(seq)[ok]
    if len(v) < 4:
        return None
    order = np.argsort(seq, kind="stable")
    v, seq = v[order], seq[order]
    plan = resampling_for(v - v.mean(), seq)
    sums = plan.replicate_sums(np.stack([v, np.ones_like(v)], 1), settings.n_boot, settings.seed)
    lo, hi = plan.interval(v.mean(), sums[:, 0] / sums[:, 1], settings.level)
    return Estimate(float(v.mean()), lo, hi, plan.unit, interval_dof(plan), positions)


def _per_token(st, layer, L, reader, settings):
    skip = settings.skip_positions
    vals = [getattr(st, reader)(layer, s)[skip:L] for s in range(st.n_seqs)]
    return np.concatenate(vals), np.repeat(np.arange(st.n_seqs), [len(x) for x in vals])


LAYER_OBSERVABLES = ("beta", "density")    # what one layer shows of itself across depth


def observables(st, layer, L, settings, primary: Primary, law=None,
                keys=None) -> tuple[dict, str | None]:
    """({observable: Estimate} of one model group over its sequences st.n_seqs: those its
    store holds; the memory law compared). `law`: the memory law to read (a null reads its
    trained model's); None: the law this group's own profile prefers, when it fits. `keys`:
    only these observables (e.g. LAYER_OBSERVABLES), the rest not computed."""
    def wanted(key):
        return keys is None or key in keys

    out = {}
    if wanted("beta"):
        out[Label(f"β ({primary.name})", "beta")] = primary_beta(st, layer, L, settings, primary)
    if wanted("density"):
        out[density_label(primary)] = window_density_of(st, layer, L, settings, primary)
    for name, reader, key, log in (
            ("log ‖J_tt‖_F² (token mean of the log)", "frobenius2", "log_frobenius", True),
            ("non-normality of J_tt (token mean)", "nonnormality", "nonnormality", False)):
        if reader in st.group and wanted(key):
            out[Label(name, key)] = token_mean(*_per_token(st, layer, L, reader, settings),
                                               settings, log, f"t < {L}")
    if st.depth and "lyapunov" in st.group and wanted("lyapunov"):
        g = [st.lyapunov(s)[:, 0] for s in range(st.n_seqs)]        # (L_max,) top exponent per token
        out[Label("top Lyapunov exponent (token mean)", "lyapunov")] = token_mean(
            np.concatenate(g), np.repeat(np.arange(st.n_seqs), [len(x) for x in g]), settings,
            positions=f"every walked t < {st.max_length}")
        out.update(_kernel_ratios(st, settings))
    law = (_memory(st, layer, settings, law, out)
           if "memory" in st.group and wanted("memory") else None)
    return {k: v for k, v in out.items() if v is not None and np.isfinite(v.value)}, law


def _kernel_ratios(st, settings) -> dict:
    """ln of the kernel's non-normality and alignment at the run's first start, longest span."""
    points = kernel_points(st, settings)
    if not points:
        return {}
    k = max(points, key=lambda p: (p.span, -p.layer))
    where = f"every walked t < {st.max_length}"
    return {Label(f"ln {part} of the kernel (l = {k.layer}, s = {k.span})",
                  "alignment" if part == "alignment" else "kernel_nonnormality"):
            Estimate(*np.log([c.value, c.lo, c.hi]), c.unit, interval_dof(c), where)
            for part in ("nonnormality", "alignment") if (c := getattr(k, part)).value > 0}


def _memory(st, layer, settings, law, out) -> str | None:
    """Add the memory parameter of `law` (None: this profile's preferred law, if it fits)."""
    if layer not in st.layers:
        return None
    fit = fit_memory(memory_profile(st, layer, settings), settings=settings)
    if law is None:
        if fit.law is None:             # rejected, or the replicates split
            return None
        law = fit.preferred
    name = COMPARED[law]
    f = fit.laws.get(law)
    if f is not None:
        every = st.memory_meta.get("every", 1)
        out[Label(f"memory {name} ({law}, layer {layer})", "memory")] = Estimate(
            f.params[name], *f.ci[name], fit.unit, interval_dof(fit),
            f"t = 0, {every}, … < {st.layer_length[layer]}")
    return law


