"""`tdos analyze STORE ...` and `tdos compare STORE[:MODEL] ... ` (sweep/cli.py delegates
here). Every option left out comes from the config's `analysis:` section that the sweep
recorded in the store, then from the defaults (sweep/format/settings.py)."""
from __future__ import annotations

import argparse
import sys

import numpy as np

from analysis.io.store import StoreError, open_store
from analysis.report.laws import law_lines
from analysis.report.analyze import analyze
from analysis.report.compare import verdict_lines, write_comparison
from analysis.report.fits_json import headline
from analysis.studies.compare import compare_models, parse_source
from sweep.format.settings import MODES, PRIMARIES, Settings, SettingsError


def _settings_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--window", nargs=2, type=float, default=None, metavar=("LO", "HI"),
                   help="fit window in λ (default: the config's analysis.window, else the "
                        "paper's 1e-4 5e-2); reaches every fit, band, time range and test")
    p.add_argument("--modes", choices=MODES, default=None,
                   help="mode count the figures draw (default all-stable, the paper's: every "
                        "0 < |ζ| < 1; symmetry-removed also drops the norm's invariant-direction "
                        "and marginal modes); tables, fits.json and report.md carry both")
    p.add_argument("--lengths", nargs="+", type=int, default=None, metavar="L",
                   help="Table I lengths (default: the config's analysis.lengths, else 8, 16, …)")
    p.add_argument("--layer", type=int, default=None,
                   help="representative layer (default: the config's analysis.layer, else 24 "
                        "when stored, else the middle stored layer)")
    p.add_argument("--level", type=float, default=None, help="confidence level (default 0.9)")
    p.add_argument("--n-boot", type=int, default=None,
                   help="bootstrap replicates per CI and Monte-Carlo sets per GOF p (default 500)")
    p.add_argument("--skip-positions", type=int, default=None, metavar="K",
                   help="leave token positions t < K out of every number (default 0)")
    p.add_argument("--seed", type=int, default=None, help="seed of every resampling (default 0)")
    p.add_argument("--memory-window", nargs=2, type=int, default=None, metavar=("K_LO", "K_HI"),
                   help="lags the token-memory fits use (default: analysis.memory_window, "
                        "else from the layer's causal-convolution width, or 1, to lags)")
    p.add_argument("--primary", choices=PRIMARIES, default=None,
                   help="β estimator:mode count of headlines and verdicts (default: "
                        "analysis.primary, else the paper's for its own setting, else tdos')")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def settings_from(args, store_path) -> Settings:
    """The store's recorded settings, then the flags given."""
    root = open_store(store_path).root.attrs
    return Settings.from_store(root, window=tuple(args.window) if args.window else None,
                               modes=args.modes, lengths=args.lengths, layer=args.layer,
                               level=args.level, n_boot=args.n_boot,
                               skip_positions=args.skip_positions, seed=args.seed,
                               memory_window=tuple(args.memory_window) if args.memory_window else None,
                               primary=args.primary)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tdos analyze", description="Figures 1–8, Table I, fits "
                                "JSON and a markdown report from a tdos store.")
    p.add_argument("store", help="path of the zarr store written by `tdos sweep`")
    p.add_argument("--out", default=None, help="output folder (default: STORE-report)")
    p.add_argument("--model", default=None, help="analyze only this model group")
    _settings_flags(p)
    return p


def compare_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tdos compare", description="β of several models on shared "
                                "axes and Δβ of every pair with a CI and a verdict.")
    p.add_argument("sources", nargs="+", metavar="STORE[:MODEL]",
                   help="a store (all its models) or one model group of it")
    p.add_argument("--out", default="compare", help="output folder (default: ./compare)")
    _settings_flags(p)
    return p


def _model_line(name, r) -> list:
    """The primary β first (the report's headline), then every estimator and count and the
    measured laws, each line labelled as a diagnostic."""
    row = r.row()
    parts = []
    for m in MODES:
        if (empty := r.empty_window_line(m)) is not None:
            parts.append(f"{m}: {empty}")
            continue
        x = row.by_mode[m]
        parts.append(f"{m} cumulative β = {x.beta:+.3f} [{x.ci_lo:+.3f}, {x.ci_hi:+.3f}] "
                     f"({x.n_modes:,} modes; CI resampled {x.ci_unit}); in-window MLE "
                     f"{x.mle_beta:+.3f} [{x.mle_ci_lo:+.3f}, {x.mle_ci_hi:+.3f}]; power law KS "
                     f"{x.ks:.4f}, p = {x.gof_p:.3f}")
    delta = f"; Δβ = {row.delta_beta:+.3f}" if np.isfinite(row.delta_beta) else ""
    h = headline(r)
    value = (f"{h.value()}; {h.n_modes:,} modes, {h.level:.0%} CI over {h.unit}" if h.fitted
             else f"not fitted: {r.empty_window_line(h.modes)}")
    lines = [f"{name} (headline, {h.name}): layer {r.layer}, L = {row.L}: {value}",
             f"  diagnostics, every estimator and count: " + "; ".join(parts) + delta]
    if r.laws is None:
        return lines
    return lines + [f"  diagnostics, measured laws ({r.modes} modes, cumulative β):",
                    *("    " + x for x in law_lines(r.laws.to_dict()))]


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        settings = settings_from(args, args.store)
        results = analyze(args.store, args.out, settings, args.model, progress=not args.quiet)
    except (StoreError, SettingsError) as exc:
        print(f"tdos analyze: {exc}", file=sys.stderr)
        return 2
    out = args.out or args.store.rstrip("/") + "-report"
    for name, r in results.items():
        print("\n".join(_model_line(name, r)))
    print(f"report: {out}/report.md")
    return 0


def compare_main(argv=None) -> int:
    args = compare_parser().parse_args(argv)
    try:
        settings = settings_from(args, parse_source(args.sources[0])[0][0])
        comparison = compare_models(args.sources, settings)
    except (StoreError, SettingsError) as exc:
        print(f"tdos compare: {exc}", file=sys.stderr)
        return 2
    write_comparison(comparison, args.out)
    print("\n".join(verdict_lines(comparison)))
    print(f"comparison: {args.out}/compare.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
