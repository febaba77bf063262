"""How a Table I (analysis/studies/tables.py `IRTable`) prints and draws: markdown, CSV and
Figs 7–8. Formatting and drawing only: every number is the table's own."""
from __future__ import annotations

import csv
import io

import numpy as np
from matplotlib.ticker import MaxNLocator

from analysis._format import ci, interval_words, num
from analysis._plot import axes_or_new, sweep_colors
from analysis.fit.alternatives import ALTERNATIVES
from analysis.spectrum.rates import check_modes
from sweep.format.settings import MODES


class TableViews:
    """The printing and drawing methods of `IRTable` (rows, by, window, level, fits, modes,
    kinds are the table's fields)."""

    def csv_text(self) -> str:
        """table1.csv: one row per L (or layer), the flat columns of `IRRow.to_dict`."""
        fh = io.StringIO(newline="")
        w = csv.DictWriter(fh, fieldnames=list(self.rows[0].to_dict()) if self.rows else [])
        w.writeheader()
        w.writerows(self.to_dicts())
        return fh.getvalue()

    def to_csv(self, path):
        with open(path, "w", newline="") as fh:
            fh.write(self.csv_text())
        return path

    def to_markdown(self, reference=None) -> str:
        """Both counts side by side; `reference` {key: β} is the paper's (all-stable) value."""
        ref = reference or {}
        ci = f"{self.level:.0%} CI"
        head = (f"| {self.by} | β all-stable | {ci} | R² | modes in window | "
                f"β symmetry-removed | {ci} | R² | modes in window | Δβ | MLE β all-stable [{ci}] | "
                f"MLE β symmetry-removed [{ci}] |" + (" paper β |" if ref else ""))
        lines = [head, "|" + "---|" * (head.count("|") - 1)]
        for r in self.rows:
            cells = [f"{r.key} ({self.kinds[r.key]})" if r.key in self.kinds else str(r.key)]
            for m in MODES:
                if not r.by_mode[m].fitted:
                    cells += ["no modes in the window", "–", "–", "0"]
                    continue
                cells += [f"{r.get('beta', m):+.3f}",
                          f"[{r.get('ci_lo', m):+.3f}, {r.get('ci_hi', m):+.3f}]",
                          f"{r.get('r2', m):.4f}", f"{r.get('n_modes', m):,}"]
            cells.append(num(r.delta_beta))
            cells += [_mle_cell(r.by_mode[m]) for m in MODES]
            if ref:
                cells.append(f"{ref[r.key]:+.3f}" if r.key in ref else "–")
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines + self.floor_lines())

    def density_lines(self) -> list:
        """Stable modes per token in the window, by row, of the table's mode count."""
        m = self.modes
        cells = [f"{r.key}: {num(r.get('density', m), '.3g')} [{num(r.get('density_lo', m), '.3g')}, "
                 f"{num(r.get('density_hi', m), '.3g')}]" for r in self.rows]
        unit = self.rows[-1].get("ci_unit", self.modes) if self.rows else ""
        return [f"Window mode density ({self.modes} modes per token in [{self.window[0]:g}, "
                f"{self.window[1]:g}], {self.level:.0%} CI, {unit}), by {self.by}: "
                + "; ".join(cells) + "."]

    def floor_lines(self) -> list:
        """What the all-stable count left out below the resolution floor (fp32), per row."""
        rows = [r for r in self.rows if r.by_mode["all-stable"].floor_source]
        if not rows:
            return []
        srcs = sorted({r.by_mode["all-stable"].floor_source for r in rows})
        left = ", ".join(f"{r.key}: {r.by_mode['all-stable'].n_unresolved:,}" for r in rows)
        return ["", f"all-stable (fp32) counts only λ ≥ {rows[0].by_mode['all-stable'].floor:.3g}, "
                f"{'; '.join(srcs)}; stable modes left out below it, by {self.by}: {left}."]

    def plot(self, ax=None, reference=None, label="this run", color="C0", xshift=1.0, marker="o",
             modes=None, estimator="cumulative"):
        """β of `estimator` ("cumulative" | "mle") and mode count `modes` (default the
        table's) with its CI; rows where the power law is rejected are drawn hollow, as window
        slopes. `xshift` multiplies the x positions (side-by-side models); `reference` {key:
        β}, the paper's cumulative all-stable values, is drawn only beside that estimator."""
        ax = axes_or_new(ax)
        modes = check_modes(modes or self.modes)
        pre = "mle_" if estimator == "mle" else ""
        name = f"{estimator}:{modes}"
        k, b = self.column("key") * xshift, self.column(pre + "beta", modes)
        if not np.isfinite(b).any():
            ax.text(0.5, 0.5, f"{label}: no mode in the window, nothing fitted", ha="center",
                    transform=ax.transAxes)
            return ax
        err = np.abs(np.vstack([b - self.column(pre + "ci_lo", modes),
                                self.column(pre + "ci_hi", modes) - b]))
        row = self.rows[-1].by_mode[modes] if self.rows else None
        unit = (row.mle_ci_unit if pre and row.mle_ci_unit else row.ci_unit) if row else "tokens"
        # the line and the bars carry no marker: each point is drawn once, filled where the
        # power law is not rejected (an exponent), hollow where it is (a window slope)
        ax.errorbar(k, b, yerr=err, fmt="-", color=color, capsize=3,
                    label=f"{label}, {name}: {interval_words(self.level, unit)}")
        p = self.column("gof_p", modes)
        slope = np.isfinite(p) & (p < 1 - self.level)
        if (~slope).any():
            ax.plot(k[~slope], b[~slope], marker, ms=7, color=color, ls="none",
                    label=f"an exponent: power law not rejected (GOF p ≥ {1 - self.level:.2g})")
        if slope.any():
            ax.plot(k[slope], b[slope], marker, ms=8, mfc="none", mec=color, mew=1.5, ls="none",
                    label=f"window slope, not an exponent: power law rejected (GOF p < "
                          f"{1 - self.level:.2g}; lowest p = {np.nanmin(p[slope]):.2g})")
        # a hybrid's layers side by side: one marker per kind of layer
        for kind, m in zip(sorted(set(self.kinds.values())), "sD^vP*"):
            on = np.array([self.kinds.get(r.key) == kind for r in self.rows])
            ax.plot(k[on], b[on], m, ms=9, mfc="none", mec="k", ls="none", label=f"{kind} layers")
        if reference and name == "cumulative:all-stable":
            rk = sorted(reference)
            ax.plot(rk, [reference[x] for x in rk], "s--", color="0.5", mfc="none",
                    label="paper, cumulative:all-stable")
        ax.axhline(0, color="k", lw=0.6)
        if self.by == "L":
            ax.set_xscale("log", base=2)
            ax.set_xlabel("sequence length L, tokens")
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))     # a layer is a whole number
            ax.set_xlabel("layer")
        lo, hi = self.window
        law = "N(<λ) ∝ λ^(1+β)" if estimator == "cumulative" else "density ∝ λ^β"
        ax.set_ylabel(f"β [{name}]\n{law} on [{lo:g}, {hi:g}]")
        ax.legend(fontsize=7, loc="best")
        return ax

    def plot_cumulative(self, ax=None, modes=None):
        """Fig 7: N(<λ) with the cumulative fits of mode count `modes`, one colour per row; a
        row where the power law is rejected is drawn dashed and called a window slope."""
        ax = axes_or_new(ax)
        modes = check_modes(modes or self.modes)
        fits = self.fits.get(modes, {})
        fitted = {k: f for k, f in fits.items() if np.isfinite(f.s)}
        gof = {r.key: r.by_mode[modes].gof_p for r in self.rows}
        for (key, fit), c in zip(fitted.items(), sweep_colors(len(fitted))):
            p = gof.get(key, np.nan)
            if np.isfinite(p) and p < 1 - self.level:
                fit.plot(ax, color=c, ls="--", label=f"{self.by} = {key}: window slope s − 1 = "
                         f"{fit.beta:+.3f}, power law rejected, GOF p = {p:.2g}")
            else:
                fit.plot(ax, color=c, label=f"{self.by} = {key}: β = {fit.beta:+.3f}, GOF p = "
                         f"{p:.2g}")
        if not fitted:
            ax.text(0.5, 0.5, "no mode in the window: nothing fitted", ha="center",
                    transform=ax.transAxes)
        for v in self.window:
            ax.axvline(v, color="0.6", ls=":", lw=0.8)
        ax.set_ylabel(f"N(<λ), {modes} modes; fits: cumulative:{modes}")
        return ax

    def gof_markdown(self) -> str:
        """Both estimators side by side and how well a power law fits, one line per row and count."""
        ci = f"{self.level:.0%} CI"
        head = (f"| {self.by} | count | β cumulative [{ci}] | β MLE in window [{ci}] | modes below "
                f"window | estimators | KS | GOF p | local β low / high decade | R, p vs log-normal | "
                f"R, p vs exponential | R, p vs stretched exp. | modes per token in window [{ci}] |")
        lines = [head, "|" + "---|" * (head.count("|") - 1)]
        for r in self.rows:
            for m in MODES:
                x = r.by_mode[m]
                if not x.fitted:
                    lines.append(f"| {r.key} | {m} | no modes in the window | – | {x.n_below:,} | – | – "
                                 f"| – | – | – | – | – | 0 |")
                    continue
                alts = [f"{num(getattr(x, 'R_' + a), '+.2f')}, {num(getattr(x, 'p_' + a), '.2g')}"
                        for a in ALTERNATIVES]
                lines.append(
                    f"| {r.key} | {m} | {x.beta:+.3f} [{num(x.ci_lo)}, {num(x.ci_hi)}] | "
                    f"{_mle_cell(x)} | {x.n_below:,} | "
                    f"{'**disagree**' if x.estimators_disagree else 'CIs overlap'} | {num(x.ks, '.4f')} | "
                    f"{num(x.gof_p, '.3f')} | {num(x.local_beta_low)} / {num(x.local_beta_high)} | "
                    + " | ".join(alts) + f" | {num(x.density, '.3g')} [{num(x.density_lo, '.3g')}, "
                    f"{num(x.density_hi, '.3g')}] |")
        return "\n".join(lines)


def _mle_cell(mr) -> str:
    """The in-window MLE β [CI] of one ModeRow."""
    if not np.isfinite(mr.mle_beta):
        return "–"
    return f"{mr.mle_beta:+.3f} {ci(mr.mle_ci_lo, mr.mle_ci_hi)}"
