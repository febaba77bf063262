"""report.md's lines of the measured laws (analysis/laws/uncertainty.py `MeasuredLaws`), from
the dict fits.json stores, and Table I's note on what its intervals resampled."""
from __future__ import annotations

from analysis._format import ci as _ci
from analysis._format import num, short_of
from sweep.format.settings import MODES


def laws_markdown(laws: dict) -> list:
    """report.md lines from `MeasuredLaws.to_dict()` (as stored in fits.json)."""
    if not laws:
        return []
    fits = list(laws["self_averaging"]["fits"].values()) + list(laws["ir_resolution"]["fits"].values())
    sa = fits[0] if fits else {"method": "", "level": 0.9}
    return ([f"### Measured laws (layer {laws['layer']}, App. B and K(t))", ""]
            + [f"- {x}" for x in law_lines(laws)]
            + ["", f"Methods ({sa['level']:.0%} CIs). Band-weight variance and deep-IR resolution: "
               f"{sa['method']}; the jackknife leaves out one chunk of consecutive tokens at a time "
               f"(Student's t, chunks − 1 degrees of freedom). Memory kernel: "
               f"{laws['memory_kernel']['method']}.", ""])


def law_lines(laws: dict) -> list:
    """One line per measured law (β, self-averaging, deep-IR resolution, K(t)) with its CI."""
    ci = laws["beta_ci"]
    md = [f"β = {num(laws['beta'])} {_ci(*ci)} at L = {laws['L']} "
          f"(bootstrap resampling {laws['beta_ci_unit']})"]
    for f in (list(laws["self_averaging"]["fits"].values())
              + list(laws["ir_resolution"]["fits"].values())):
        if "check" in f and short_of(f["check"]):
            md.append(f"{f['name']} vs {f['x']}: {short_of(f['check'])}")
            continue
        e = f["expected_ci"]
        pred = (num(f["expected"]) if e[0] == e[1] else
                f"{num(f['expected'])} {_ci(*e)} (from β's CI)")
        md.append(f"{f['name']} vs {f['x']}: slope {num(f['slope'])} {_ci(*f['ci'])}, "
                  f"χ²/dof {num(f['chi2_red'], '.2f')}, {f['n_points']} points; "
                  f"predicted {pred}: {_agreement(f)}")
    k = laws["memory_kernel"]
    md.append(f"memory kernel K(t) ~ t^−a over t ∈ [{k['t_range'][0]:g}, {k['t_range'][1]:g}] "
              f"blocks: a = {num(k['exponent'], '.3f')} {_ci(*k['ci'], fmt='.3f')}; 1+β = "
              f"{num(k['expected_1_plus_beta'], '.3f')} {_ci(*k['expected_ci'], fmt='.3f')} "
              f"({k['check']})")
    return md


def _agreement(f) -> str:
    """The band-variance slope's −1 is a law of independent tokens, data-free: a check. The
    deep-IR resolution's −1/(1+β) takes β from the same modes' N(<λ) (which counts the
    deepest rates too): overlap is expected, so it is labelled as such, not as a check."""
    if f["consistent"] is None:         # no interval on one side: nothing to hold them against
        return "no interval, no verdict"
    word = "consistent" if f["consistent"] else "not consistent"
    if f["name"].startswith("λ_("):
        return f"{'overlaps' if f['consistent'] else 'does not overlap'} (β from the same modes: not an independent check)"
    return word


def table_note(table, n_seqs) -> str:
    """Table I's honesty line: nested rows, and what each CI resampled."""
    units = sorted({r.get("ci_unit", m) for r in table.rows for m in MODES})
    ks = sorted({int(u.split()[3]) for u in units if u.startswith("circular blocks of ")})
    if len(ks) > 1 and len(ks) == len(units):       # one block length per row: give the range
        units = [f"circular blocks of k = {ks[0]}…{ks[-1]} tokens (k by row and mode count: columns ci_unit_*)"]
    how = "; ".join(u if u.startswith("jackknife") else f"a bootstrap over {u}" for u in units)
    seqs = (f"{n_seqs} sequences; each CI carries the variation between them" if n_seqs > 1 else
            "one sequence, so the CIs cannot carry variation between sequences")
    return (f"Rows are nested prefixes: row L holds tokens t < L of the same {seqs.split(';')[0]}, "
            f"so every row contains the rows above it and their errors are correlated; they are "
            f"not independent measurements. CIs: {table.level:.0%}, {how} ({seqs}).")
