"""Which transformers tdos runs on: the minimum its generic path needs, and the tested ones.

MIN_TRANSFORMERS is the oldest release the family tests pass on. The APIs the generic path
calls exist since 5.14.0 (`LinearAttentionCacheLayerMixin.number_of_states`), but on 5.14.0
14 of the 24 families it knows fail the whole-sequence autograd test (Mamba-style decode steps
call no op tdos recognises, so Δ_t is unreadable; attention layers differ too), so the bound
is the tested one; pyproject's lower bound equals it (tests/test_versions.py).
TESTED_TRANSFORMERS are the releases the family tests passed on: the lock file pins the
newest (`make test`), `make test-latest` tries the newest allowed release, and
`make test-latest TRANSFORMERS=X` any other. A sweep checks itself on whatever release it
meets (sweep/generic/selfcheck.py); these names go into its one-line refusals.
TESTED_TORCH is the torch release the lock file pins (its CPU build, what `make test` runs
on); every message that depends on the environment names both installed versions, torch's
with its build (`2.13.0+cpu`, or the CUDA build's plain `2.13.0`), and which of them lies
outside the tested ones (`versions_note`).
"""
from __future__ import annotations

from sweep.errors import UnsupportedTransformers

MIN_TRANSFORMERS = "5.24.0"
TESTED_TRANSFORMERS = ("5.24.0", "5.25.0")
TESTED_TORCH = ("2.13.0",)


def tested_range() -> str:
    return ", ".join(TESTED_TRANSFORMERS)


def release(version: str) -> tuple[int, ...]:
    """'5.25.0.dev0' -> (5, 25, 0): the numeric release (packaging's, pre-release tags dropped)."""
    from packaging.version import Version

    return Version(version).release


def transformers_problem(version: str) -> str | None:
    """The one-line refusal for an installed transformers `version`, or None when it is new
    enough."""
    if release(version) >= release(MIN_TRANSFORMERS):
        return None
    found = {"torch": installed()["torch"], "transformers": version}
    return (f"transformers {version} is older than {MIN_TRANSFORMERS}, the first release with the "
            f"cache and generation APIs tdos' generic path uses; found {versions_note(found)} — "
            f"pip install 'transformers>={MIN_TRANSFORMERS}'")


def require_transformers() -> None:
    """Raise UnsupportedTransformers when the installed transformers is too old."""
    from importlib.metadata import version

    problem = transformers_problem(version("transformers"))
    if problem:
        raise UnsupportedTransformers(problem)


def installed() -> dict[str, str]:
    """{"torch": "2.13.0+cpu", "transformers": "5.25.0"}: the installed distributions'
    versions as pip recorded them (torch's local label names its build), without importing
    either."""
    from importlib.metadata import version

    return {name: version(name) for name in ("torch", "transformers")}


def versions_note(found: dict[str, str] | None = None) -> str:
    """"torch 2.13.0+cpu and transformers 5.25.0 (tdos is tested on torch 2.13.0, transformers
    5.24.0, 5.25.0; torch lies outside)": what an environment-dependent message says."""
    found = found or installed()
    tested = {"torch": TESTED_TORCH, "transformers": TESTED_TRANSFORMERS}
    outside = [n for n, v in found.items()
               if release(v) not in {release(t) for t in tested[n]}]
    where = (f"; {' and '.join(outside)} {'lies' if len(outside) == 1 else 'lie'} outside"
             if outside else "; both tested")
    return (f"torch {found['torch']} and transformers {found['transformers']} (tdos is tested on "
            f"torch {', '.join(TESTED_TORCH)}, transformers {tested_range()}{where})")
