"""The transformers releases tdos is tested on: what the self-check's refusal names.

The lock file (requirements.lock) pins the newest of them for `make test`; `make test-latest`
tries the newest allowed release. tests/test_versions.py holds this tuple to the lock.
"""
TESTED_TRANSFORMERS = ("5.24.0", "5.25.0")


def tested_range() -> str:
    lo, hi = TESTED_TRANSFORMERS[0], TESTED_TRANSFORMERS[-1]
    return lo if lo == hi else f"{lo} to {hi}"
