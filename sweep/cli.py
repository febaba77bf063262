"""`tdos`: sweep / status / analyze / cluster up. Thin: each command calls one function.

A bad config or a store made from another config is a user error: one line
`tdos: error: <message>` and exit status 2, no traceback.
"""
from __future__ import annotations

import argparse
import sys

from sweep.config import ConfigError

USAGE = """tdos sweep CONFIG.yaml [--store PATH] [--workers N] [--scheduler ADDRESS] [--resume]
       tdos status STORE
       tdos analyze STORE [--out DIR] [--window LO HI]
       tdos cluster up ..."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["analyze"]:
        from analysis.cli import main as analyze

        return analyze(argv[1:])
    if argv[:2] == ["cluster", "up"]:
        from cluster.cli import up

        return up(argv[2:])
    args = _parser().parse_args(argv)
    from sweep.store import StoreMismatch

    try:
        return args.func(args)
    except (ConfigError, StoreMismatch) as e:
        print(f"tdos: error: {e}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tdos", usage=USAGE,
                                description="Per-token Jacobian spectra of LM blocks, swept on Dask.")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sweep", help="run (or finish) a sweep")
    s.add_argument("config", help="sweep YAML (see configs/tiny.yaml)")
    s.add_argument("--store", help="override the config's store path")
    s.add_argument("--workers", type=int, help="worker processes of a local cluster")
    s.add_argument("--scheduler", help="address of a running scheduler (tcp://host:port)")
    s.add_argument("--resume", action="store_true",
                   help="finish an existing store: only blocks not in its ledger run")
    s.set_defaults(func=_sweep)
    t = sub.add_parser("status", help="blocks done per model and layer")
    t.add_argument("store")
    t.add_argument("--spectra", action="store_true",
                   help="also a spectral summary per layer (reads the eigenvalues)")
    t.set_defaults(func=_status)
    sub.add_parser("analyze", help="analysis report (see `tdos analyze --help`)")
    sub.add_parser("cluster", help="`tdos cluster up ...`: start a cluster and print its address")
    return p


def _sweep(args) -> int:
    from sweep.config import load_config
    from sweep.run import run_sweep

    overrides = {"store": args.store} if args.store else {}
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers: must be >= 1, got {args.workers}")
    cfg = load_config(args.config, overrides)
    try:
        result = run_sweep(cfg, workers=args.workers, scheduler=args.scheduler, resume=args.resume)
    except KeyboardInterrupt:
        print("tdos: interrupted; rerun with --resume to finish", file=sys.stderr)
        return 130
    if result.exit_code == 0:
        _print_summary(cfg.store)
    return result.exit_code


def _print_summary(store: str) -> None:
    from analysis.summary import format_summary, summary_rows

    print(f"\nstore: {store}   (tdos analyze {store} --out DIR for figures and fits)")
    print(format_summary(summary_rows(store)))


def _status(args) -> int:
    from pathlib import Path

    from sweep.store import StoreMismatch, status_rows

    if not (Path(args.store) / "zarr.json").is_file():
        raise StoreMismatch(f"store: {args.store} not found; give the path of a sweep's store")
    rows = status_rows(args.store)
    print(f"{'model':<28} {'layer':>5} {'done':>6} {'flagged':>7} {'total':>6} {'tokens':>6}  dtype")
    for r in rows:
        print(f"{r['model']:<28} {_s(r['layer']):>5} {r['done']:>6} {r['flagged']:>7} "
              f"{_s(r['total']):>6} {_s(r['tokens']):>6}  {_s(r['dtype'])}")
    if args.spectra:
        _print_summary(args.store)
    return 0


def _s(v) -> str:
    return "-" if v is None else str(v)
