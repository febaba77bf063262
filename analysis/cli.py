"""`tdos analyze STORE ...` and `tdos compare STORE[:MODEL] ... ` (sweep/cli.py delegates
here). Their settings flags are made from the `analysis:` section's declaration
(sweep/format/settings.py); every one left out comes from that section as the sweep recorded
it in the store, then from its defaults. Errors are one line, `tdos: error: ...`, exit 2."""
from __future__ import annotations

import argparse
import contextlib
import io
import sys
import warnings

import numpy as np

from analysis.io.store import StoreError, open_store
from analysis.report.laws import law_lines
from analysis.report.analyze import analyze
from analysis.report.compare import verdict_lines, write_comparison
from analysis.report.fits_json import headline
from analysis.studies.compare import compare_models, parse_source
from sweep.format.fields import FieldError, declared, default_words, flag, plain_help
from sweep.format.settings import MODES, Settings

class UsageError(Exception):
    """A bad command line; said in one line like every other error."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{message} — see `{self.prog} --help`")


def _settings_flags(p: argparse.ArgumentParser) -> None:
    """One flag per field of the `analysis:` section, made from its declaration
    (sweep/format/settings.py): the same name, help and default as docs/config.md's rows; a bad
    value is refused by the section's own check, the same line a config would get."""
    for f in declared(Settings):
        name, kwargs = flag(Settings, f)
        default = default_words(f).removeprefix("default ")
        otherwise = "" if default == "null" else f", else {default.replace('`', '')}"
        p.add_argument(name, default=None, **kwargs,
                       help=f"{plain_help(f)} (default: the store's recorded analysis.{f.name}"
                            f"{otherwise})".replace("%", "%%"))
    p.add_argument("--quiet", action="store_true",
                   help="print nothing but errors and the path of the result")


def settings_from(args, store_path) -> Settings:
    """The store's recorded settings, then the flags given."""
    root = open_store(store_path).root.attrs
    given = {f.name: getattr(args, f.name) for f in declared(Settings)}
    return Settings.from_store(root, **{k: tuple(v) if isinstance(v, list) else v
                                        for k, v in given.items()})


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="tdos analyze", description="Figures 1–8, Table I, fits JSON and a markdown "
                "report from a tdos store. Every setting left out comes from the config's "
                "`analysis:` section as the sweep recorded it in the store (docs/config.md).")
    p.add_argument("store", help="path of the zarr store written by `tdos sweep`")
    p.add_argument("--out", default=None, help="output folder (default: STORE-report)")
    p.add_argument("--model", default=None, help="analyze only this model group")
    _settings_flags(p)
    return p


def compare_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="tdos compare", description="β of several models on shared axes and Δβ of "
                "every pair with a CI and a verdict; settings left out come from the first store.")
    p.add_argument("sources", nargs="+", metavar="STORE[:MODEL]",
                   help="a store (all its models) or one model group of it")
    p.add_argument("--out", default="compare", help="output folder (default: ./compare)")
    _settings_flags(p)
    return p


def _error(message: str) -> int:
    print(f"tdos: error: {message}", file=sys.stderr)
    return 2


@contextlib.contextmanager
def _quiet(quiet: bool):
    """--quiet: nothing reaches the console from inside (progress, warnings, notes); errors
    still do, as the exceptions they are."""
    if not quiet:
        yield
        return
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


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
    try:
        args = parser().parse_args(argv)
        with _quiet(args.quiet):
            settings = settings_from(args, args.store)
            results = analyze(args.store, args.out, settings, args.model, progress=not args.quiet)
    except (StoreError, FieldError, UsageError) as exc:
        return _error(str(exc))
    out = args.out or args.store.rstrip("/") + "-report"
    if not args.quiet:
        for name, r in results.items():
            print("\n".join(_model_line(name, r)))
    print(f"report: {out}/report.md")
    return 0


def compare_main(argv=None) -> int:
    try:
        args = compare_parser().parse_args(argv)
        with _quiet(args.quiet):
            settings = settings_from(args, parse_source(args.sources[0])[0][0])
            comparison = compare_models(args.sources, settings)
            write_comparison(comparison, args.out)
    except (StoreError, FieldError, UsageError) as exc:
        return _error(str(exc))
    if not args.quiet:
        print("\n".join(verdict_lines(comparison)))
    print(f"comparison: {args.out}/compare.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
