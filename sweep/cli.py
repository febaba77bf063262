"""`tdos`: sweep / status / analyze / compare / cluster up. Thin: each command calls one function.

Every error that comes from the user's input (config, checkpoint, texts, store path) is one
line, `tdos: error: <what> — <fix>`, with exit status 2 and no traceback. Anything else is a
bug in tdos: its traceback, then one line asking for a report, exit status 1.
"""
from __future__ import annotations

import argparse
import contextlib
import shlex
import signal
import sys
import threading
import traceback
import unicodedata

from sweep.errors import (CheckpointChanged, ConfigError, NonCausal, RouteFailed, SelfCheckFailed,
                          StoreMismatch, UnsupportedTransformers)

def usage() -> str:
    """The usage line of every command; `analyze` and `compare` list their settings flags,
    made from the `analysis:` section's declaration (sweep/format/settings.py)."""
    from sweep.format.fields import declared, flag
    from sweep.format.settings import Settings

    settings = [_usage_of(*flag(Settings, f)) for f in declared(Settings)]
    pad = " " * 7
    return (f"tdos sweep CONFIG.yaml [--store PATH] [--workers N] [--scheduler ADDRESS] [--resume] "
            f"[--dry-run] [--wait] [--verbose]\n"
            f"{pad}tdos status STORE [--spectra]\n"
            f"{pad}tdos analyze STORE [--out DIR] [--model NAME] [--quiet] SETTINGS\n"
            f"{pad}tdos compare STORE[:MODEL] STORE[:MODEL] ... [--out DIR] [--quiet] SETTINGS\n"
            f"{pad}tdos upgrade STORE\n"
            f"{pad}tdos export-null STORE NULL_MODEL OUT\n"
            f"{pad}tdos cluster up ...\n"
            f"{pad}tdos --version\n"
            f"SETTINGS (each overrides the store's recorded `analysis:` field of its name):\n"
            + "\n".join(pad + " ".join(line) for line in _lines(settings, 100 - len(pad))))


def _usage_of(name: str, kwargs: dict) -> str:
    metavar = kwargs["metavar"]
    shown = (" ".join(metavar) if isinstance(metavar, tuple)
             else f"{metavar} ..." if kwargs.get("nargs") == "+" else metavar)
    return f"[{name} {shown}]"


def _lines(words: list[str], width: int) -> list[list[str]]:
    """`words` packed into lines of at most `width` characters, none split."""
    lines = [[]]
    for w in words:
        if lines[-1] and len(" ".join([*lines[-1], w])) > width:
            lines.append([])
        lines[-1].append(w)
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["analyze"]:
        from analysis.cli import main as analyze

        return analyze(argv[1:])
    if argv[:1] == ["compare"]:
        from analysis.cli import compare_main

        return compare_main(argv[1:])
    if argv[:2] == ["cluster", "up"]:
        from cluster.cli import up

        return up(argv[2:])
    try:
        args = _parser().parse_args(argv)
        return args.func(args)
    except (ConfigError, StoreMismatch, CheckpointChanged, NonCausal, SelfCheckFailed, RouteFailed,
            UnsupportedTransformers) as e:
        _error(str(e))
        return 2
    except KeyboardInterrupt:
        raise
    except Exception:  # not the user's input: a bug, reported with everything we know
        traceback.print_exc()
        _error("internal error (a bug in tdos, not in your input) — please report it with the "
               "traceback above, the command and the config")
        return 1


def version() -> str:
    """`tdos --version`: the release, and the store format it writes and reads."""
    from importlib.metadata import PackageNotFoundError, version as release

    from sweep.format.schema import FORMAT

    try:
        number = release("tdos")
    except PackageNotFoundError:          # a source tree run without installing it
        number = "(not installed)"
    return f"tdos {number} (store format {FORMAT})"


class _OneLineParser(argparse.ArgumentParser):
    """argparse's usage errors as one `tdos: error:` line, like every other user error."""

    def error(self, message):
        raise ConfigError(f"{message} — see `tdos --help`")


def _error(message: str) -> None:
    """Print one line whatever the message holds: control characters (a newline in a
    path) are escaped, and characters stderr cannot encode are written as escapes."""
    line = "".join(repr(ch)[1:-1] if unicodedata.category(ch) in ("Cc", "Cs") else ch
                   for ch in message)
    enc = getattr(sys.stderr, "encoding", None) or "utf-8"
    print(f"tdos: error: {line}".encode(enc, "backslashreplace").decode(enc), file=sys.stderr)


def _parser() -> argparse.ArgumentParser:
    p = _OneLineParser(prog="tdos", usage=usage(),
                       description="Per-token Jacobian spectra of LM blocks, swept on Dask.")
    p.add_argument("--version", action="version", version=version())
    # prog: each subcommand's usage starts `tdos sweep`, not the whole multi-line usage()
    sub = p.add_subparsers(dest="command", required=True, prog="tdos")
    s = sub.add_parser("sweep", help="run (or finish) a sweep")
    s.add_argument("config", help="sweep YAML (see configs/tiny.yaml)")
    s.add_argument("--store", help="override the config's store path")
    s.add_argument("--workers", type=int, help="worker processes of a local cluster")
    s.add_argument("--scheduler", help="address of a running scheduler (tcp://host:port)")
    s.add_argument("--resume", action="store_true",
                   help="finish an existing store: only blocks not in its ledger run")
    s.add_argument("--dry-run", action="store_true",
                   help="print the budget (blocks, store size, memory per worker, core-hours); run nothing")
    s.add_argument("--wait", action="store_true",
                   help="when another sweep is writing the store, wait for it instead of stopping")
    s.add_argument("--verbose", action="store_true",
                   help="Dask's own worker and scheduler warnings on the console (default: "
                        "STORE.log), and at the end the spectral summary per layer with what its "
                        "columns count")
    s.set_defaults(func=_sweep)
    t = sub.add_parser("status", help="blocks done per model and layer")
    t.add_argument("store")
    t.add_argument("--spectra", action="store_true",
                   help="also a spectral summary per layer (reads the eigenvalues)")
    t.set_defaults(func=_status)
    u = sub.add_parser("upgrade", help="rewrite an older store to the current format, in place")
    u.add_argument("store")
    u.set_defaults(func=_upgrade)
    x = sub.add_parser("export-null", help="one null model of a store as a save_pretrained checkpoint")
    x.add_argument("store")
    x.add_argument("null_model", help="its group name, e.g. mamba.random_init.0")
    x.add_argument("out", help="a new directory")
    x.set_defaults(func=_export_null)
    sub.add_parser("analyze", help="analysis report (see `tdos analyze --help`)")
    sub.add_parser("compare", help="β of several models and Δβ of every pair (`tdos compare --help`)")
    sub.add_parser("cluster", help="`tdos cluster up ...`: start a cluster and print its address")
    return p


def _sweep(args) -> int:
    from sweep.budget import check_fits, size_sweep
    from sweep.config.load import load_config
    from sweep.worker.versions import require_transformers

    require_transformers()
    overrides = {"store": args.store} if args.store else {}
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers: must be >= 1, got {args.workers} — leave it out for one per core")
    from sweep.plan.make import make_plan

    plan = make_plan(load_config(args.config, overrides))     # every input read and checked
    cost = size_sweep(plan, args.workers, args.scheduler)
    if args.dry_run:
        print(cost.table())
        print(cost.summary())
    check_fits(cost)                 # refused with the numbers, before the store exists
    if args.dry_run:
        return 0
    print(cost.summary(), flush=True)
    from sweep.run import run_sweep

    cfg = plan.config
    received: list[int] = []
    try:
        with _stopped_by_signals(received):
            result = run_sweep(plan, workers=args.workers, scheduler=args.scheduler,
                               resume=args.resume, wait=args.wait, verbose=args.verbose,
                               again=f"rerun `{_resume_command(args)}`")
    except KeyboardInterrupt:                 # at the sweep's start or end: what is written stays
        print(f"tdos: interrupted; rerun `{_resume_command(args)}` to finish", file=sys.stderr)
        return 128 + (received[0] if received else signal.SIGINT)
    if result.interrupted and received:
        return 128 + received[0]              # 130 for SIGINT, 143 for SIGTERM
    if result.exit_code == 0:
        if args.verbose:                  # the table per layer, and what its columns count
            print(_spectral_summary(cfg.store))
        print(f"next: tdos analyze {shlex.quote(cfg.store)}   (report.md, figures, fits.json; "
              f"`tdos status {shlex.quote(cfg.store)} --spectra`: β per layer now)")
    return result.exit_code


@contextlib.contextmanager
def _stopped_by_signals(received: list):
    """SIGINT and SIGTERM stop the sweep as Ctrl-C does (what is written stays, the run says
    how to finish it), installed explicitly: a shell starts a background job (`tdos sweep
    ... &`) with SIGINT ignored, and Python keeps an ignored SIGINT ignored. `received` gets
    the signal's number."""
    def stop(signum, frame):
        received.append(signum)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    if threading.current_thread() is not threading.main_thread():   # only it may set handlers
        yield
        return
    saved = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


def _resume_command(args) -> str:
    """The command that finishes this sweep."""
    words = ["tdos", "sweep", args.config]
    for flag, value in (("--store", args.store), ("--workers", args.workers),
                        ("--scheduler", args.scheduler)):
        words += [flag, str(value)] if value is not None else []
    return shlex.join([*words, "--resume"])


def _spectral_summary(store: str) -> str:
    """The spectral summary per layer (analysis/views/summary.py), with its legend."""
    from analysis.views.summary import summary_text

    return summary_text(store)


def _status(args) -> int:
    import zarr

    from sweep.config.validate import existing_store
    from sweep.format.variants import ROLES
    from sweep.store.ledger import memory_rows, status_rows, variant_rows, walk_rows
    from sweep.store.study import status_line as study_status

    existing_store(args.store)
    rows = status_rows(args.store)
    lines = {role: variant_rows(args.store, role) for role in ROLES}
    nulls = lines["null"]
    print(f"{'model':<28} {'layer':>5} {'done':>6} {'flagged':>7} {'total':>6} {'L':>6} "
          f"{'h_l':>5}  {'dtype':<8} kind")
    for i, r in enumerate(rows):
        print(f"{r['model']:<28} {_s(r['layer']):>5} {r['done']:>6} {r['flagged']:>7} "
              f"{_s(r['total']):>6} {_s(r['tokens']):>6} {_s(r['residual']):>5}  {_s(r['dtype']):<8} "
              f"{_s(r['kind'])}")
        if i + 1 == len(rows) or rows[i + 1]["model"] != r["model"]:    # under its last layer
            for role, found in lines.items():
                if r["model"] in found:
                    print(null_line(found[r["model"]], role))
    print("done counts flagged blocks (done, with a non-finite value) too; L: tokens per sequence "
          "swept at the layer; h_l: sequences whose residual stream entering the layer is stored" + ("; nulls: a model's null models "
                                                             "(docs/nulls.md), blocks summed over "
                                                             "them, every layer" if nulls else ""))
    if (line := study_status(zarr.open_group(args.store, mode="r").attrs)) is not None:
        print(line)
    for w in walk_rows(args.store):
        l0, l1 = w["layers"]
        print(f"{w['model']}: {w['done']}/{w['total']} walks up layers {l0}..{l1} done (stacks of "
              f"spans {w['spans']}, Lyapunov exponents; a walk is one sequence's token block)")
    for m in memory_rows(args.store):
        print(f"{m['model']}: {m['done']}/{m['total']} token-memory profiles done (lags 0..{m['lags']}, "
              f"{m['estimator']}, output tokens t = 0, {m['every']}, {2 * m['every']}, ...; a profile "
              f"is one layer's sequence)")
    if args.spectra:
        print(_spectral_summary(args.store))
    return 0


def null_line(n: dict, role: str = "null") -> str:
    """One line for a model's variants of `role` (sweep.store.ledger.variant_rows)."""
    kinds = "; ".join(f"{k} {', '.join(map(str, seeds))}" for k, seeds in n["kinds"].items())
    count = len(n["models"])
    parts = [f"{n['done']}/{n['total']} blocks done", f"{n['flagged']} flagged",
             f"{n['complete']} of {count} complete"]
    if n["walks"]:
        parts.append(f"{n['walks'][0]}/{n['walks'][1]} walks")
    if n["profiles"]:
        parts.append(f"{n['profiles'][0]}/{n['profiles'][1]} token-memory profiles")
    used, of = n["sequences"]
    on = f", on the first {used} of {of} sequences" if used < of else ""
    label = "nulls" if role == "null" else role
    return f"  + {label}: {count} model{'s' * (count > 1)} ({kinds}){on}: {', '.join(parts)}"


def _s(v) -> str:
    return "-" if v is None else str(v)


def _export_null(args) -> int:
    from sweep.export import export_null

    out = export_null(args.store, args.null_model, args.out)
    print(f"{args.null_model}: written to {out} (save_pretrained; docs/nulls.md)")
    return 0


def _upgrade(args) -> int:
    from sweep.format.schema import FORMAT
    from sweep.store.upgrade import upgrade

    old = upgrade(args.store)
    print(f"{args.store}: format {FORMAT}" + (" already" if old == FORMAT else f" (was {old})"))
    return 0
