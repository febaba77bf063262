"""Wall time of the README's three quick-start commands, as a new user runs them.

    .venv/bin/python benchmarks/bench_quickstart.py

runs, from the repository root, `tdos sweep configs/tiny.yaml`, `tdos status STORE --spectra`
and `tdos analyze STORE --out DIR` (the store and report in a fresh temporary directory, so
out/ is left alone), each as its own process, and writes results/bench_quickstart.{md,json}
with the seconds, the load average before and after, and the machine's core count. The
README's quick-start sentence quotes these seconds (tests/test_cli_docs.py holds it to them).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results"


def tdos() -> list[str]:
    """The `tdos` beside this interpreter (the venv's), else `python -m sweep`."""
    exe = Path(sys.executable).parent / "tdos"
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "sweep"]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store, report = f"{tmp}/tiny.zarr", f"{tmp}/tiny-report"
        steps = [("sweep", ["sweep", "configs/tiny.yaml", "--store", store]),
                 ("status", ["status", store, "--spectra"]),
                 ("analyze", ["analyze", store, "--out", report])]
        load0, rows = os.getloadavg(), []
        for name, args in steps:
            t0 = time.perf_counter()
            subprocess.run(tdos() + args, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
            rows.append({"command": name, "argv": ["tdos", *(a.replace(tmp, "TMP") for a in args)],
                         "seconds": time.perf_counter() - t0})
            print(f"{name}: {rows[-1]['seconds']:.1f} s", flush=True)
    record = {"command": "python benchmarks/bench_quickstart.py", "cpus": os.cpu_count(),
              "load_before": load0, "load_after": os.getloadavg(), "steps": rows,
              "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_quickstart.json").write_text(json.dumps(record, indent=1) + "\n")
    lines = ["# The README's quick start, timed", "",
             f"`{record['command']}` on {record['cpus']} cores, {record['date']}; load average "
             f"{record['load_before'][0]:.2f} before, {record['load_after'][0]:.2f} after "
             f"(other jobs on the machine lengthen every step).", "",
             "| command | seconds |", "|---|---|"]
    lines += [f"| `{' '.join(r['argv'])}` | {r['seconds']:.0f} |" for r in rows]
    (OUT / "bench_quickstart.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
