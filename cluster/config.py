"""The cluster's config (the `cluster:` section of a sweep YAML): one typed dataclass per section.

Every check runs in `__post_init__`, so a config built in Python and one loaded from YAML
fail the same way: a `ConfigError` whose one-line message names the field and the fix.
The cluster owns its config and its error, so cluster imports nothing of sweep; sweep's
config loader turns this ConfigError into sweep.errors.ConfigError.
"""
from __future__ import annotations

import dataclasses
import difflib
import os
from dataclasses import dataclass, field

from dask.utils import parse_bytes

KINDS = ("local", "cuda", "scheduler", "slurm", "auto")
SCHEMES = ("tcp", "tls", "ucx", "inproc")


class ConfigError(ValueError):
    """A cluster config value is wrong; the message names the field (`cluster.workers: ...`)."""


@dataclass(frozen=True)
class TLSConfig:
    """PEM files for tls:// connections; all three or none."""

    ca_file: str | None = None
    cert: str | None = None
    key: str | None = None
    require: bool = True     # require_encryption: refuse plain tcp:// once TLS is configured
    where: str = field(default="cluster.tls", repr=False, compare=False)

    def __post_init__(self):
        files = {"ca_file": self.ca_file, "cert": self.cert, "key": self.key}
        given = [k for k, v in files.items() if v]
        if given and len(given) < 3:
            missing = sorted(set(files) - set(given))
            raise ConfigError(f"{self.where}.{missing[0]}: TLS needs ca_file, cert and key together — "
                              f"only {', '.join(given)} given")
        for name, path in files.items():
            if path and not os.path.isfile(path):
                raise ConfigError(f"{self.where}.{name}: file not found: {path} (give a PEM file path)")
        _check_type(self.require, bool, f"{self.where}.require", "true or false")

    @property
    def enabled(self) -> bool:
        return bool(self.ca_file)


@dataclass(frozen=True)
class SlurmConfig:
    """One SLURM job = `cores` cores, `memory`, `gpus` GPUs; the cluster runs `jobs` of them."""

    queue: str | None = None
    account: str | None = None
    walltime: str = "02:00:00"
    jobs: int = 1
    cores: int = 4
    memory: str = "16GB"
    gpus: int = 0
    job_extra_directives: tuple[str, ...] = ()
    local_directory: str | None = None
    where: str = field(default="cluster.slurm", repr=False, compare=False)

    def __post_init__(self):
        w = self.where
        for name in ("jobs", "cores"):
            _check_int(getattr(self, name), f"{w}.{name}", minimum=1)
        _check_int(self.gpus, f"{w}.gpus", minimum=0)
        if self.gpus and self.cores < self.gpus:
            raise ConfigError(f"{w}.cores: {self.cores} cores cannot host {self.gpus} GPU workers — "
                              f"set cores >= gpus")
        try:
            parse_bytes(self.memory)
        except (ValueError, TypeError, AttributeError, OverflowError):  # lists, inf: not sizes
            raise ConfigError(f"{w}.memory: {self.memory!r} is not a size — write e.g. '16GB'") from None
        try:
            _walltime_seconds(self.walltime)
        except (ValueError, TypeError):
            raise ConfigError(f"{w}.walltime: {self.walltime!r} is not HH:MM:SS — write e.g. '02:00:00'") from None
        if not isinstance(self.job_extra_directives, (list, tuple)) or not all(
                isinstance(d, str) for d in self.job_extra_directives):
            raise ConfigError(f"{w}.job_extra_directives: expected a list of strings like ['--qos=high']")
        object.__setattr__(self, "job_extra_directives", tuple(self.job_extra_directives))


@dataclass(frozen=True)
class ClusterConfig:
    """Where the sweep's tasks run.

    kind: local (CPU worker processes on this machine), cuda (one worker per GPU,
    dask-cuda), scheduler (an existing scheduler at `address` or `scheduler_file`),
    slurm (dask-jobqueue), auto (cuda when GPUs and dask-cuda are present, else local).
    host None means loopback (127.0.0.1) for local/cuda clusters and dask-jobqueue's
    default interface for slurm, whose workers run on other nodes.
    """

    kind: str = "local"
    workers: int | None = None            # local: one per core; cuda: one per GPU
    threads_per_worker: int = 1
    memory_limit: str | int | None = None  # per worker; None = distributed's "auto"
    address: str | None = None
    scheduler_file: str | None = None
    host: str | None = None
    dashboard_address: str | None = "127.0.0.1:0"   # None: port 8787 on the scheduler's host
    tls: TLSConfig = field(default_factory=TLSConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    where: str = field(default="cluster", repr=False, compare=False)

    def __post_init__(self):
        w = self.where
        if self.kind not in KINDS:
            raise ConfigError(f"{w}.kind: {self.kind!r} is not one of {', '.join(KINDS)}"
                              f"{_did_you_mean(self.kind, KINDS)}")
        if self.workers is not None:
            _check_int(self.workers, f"{w}.workers", minimum=1, or_null=True)
        _check_int(self.threads_per_worker, f"{w}.threads_per_worker", minimum=1)
        for name in ("address", "scheduler_file", "host", "dashboard_address"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"{w}.{name}: expected a string or null, got {value!r}")
        _check_type(self.tls, TLSConfig, f"{w}.tls", "a TLSConfig")
        _check_type(self.slurm, SlurmConfig, f"{w}.slurm", "a SlurmConfig")
        if self.memory_limit is not None and self.memory_limit != "auto":
            try:
                parse_bytes(self.memory_limit)
            except (ValueError, TypeError, AttributeError, OverflowError):  # lists, inf: not sizes
                raise ConfigError(f"{w}.memory_limit: {self.memory_limit!r} is not a size — "
                                  f"write e.g. '4GB', 'auto' or null") from None
        if self.kind == "scheduler" and not (self.address or self.scheduler_file):
            raise ConfigError(f"{w}.address: kind 'scheduler' needs address (tcp://host:port) "
                              f"or scheduler_file")
        if self.address is not None:
            check_address(self.address, f"{w}.address", self.tls)
        if self.kind == "scheduler" and not self.address and not os.path.isfile(self.scheduler_file):
            raise ConfigError(f"{w}.scheduler_file: file not found: {self.scheduler_file} "
                              f"(start one with `tdos cluster up --scheduler-file PATH`)")

    @classmethod
    def from_dict(cls, d: dict | None, where: str = "cluster") -> "ClusterConfig":
        """Build from the YAML mapping; unknown keys and wrong types raise ConfigError."""
        d = _mapping(d, where)
        _reject_unknown(d, cls, where)
        sub = {}
        for name, sub_cls in (("tls", TLSConfig), ("slurm", SlurmConfig)):
            section = _mapping(d.get(name), f"{where}.{name}")
            _reject_unknown(section, sub_cls, f"{where}.{name}")
            sub[name] = sub_cls(**section, where=f"{where}.{name}")
        return cls(**{**d, **sub}, where=where)

    def replace(self, **changes) -> "ClusterConfig":
        """A copy with CLI overrides applied (None values are ignored), validated again."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


def check_address(address: str, where: str, tls: TLSConfig) -> None:
    if not isinstance(address, str) or not address:
        raise ConfigError(f"{where}: expected an address like tcp://host:8786, got {address!r}")
    scheme = address.split("://", 1)[0] if "://" in address else "tcp"
    if scheme not in SCHEMES:
        raise ConfigError(f"{where}: unknown protocol {scheme!r} in {address!r}; use tcp:// or tls://")
    if scheme == "tls" and not tls.enabled:
        raise ConfigError(f"{where}: {address} is tls:// but cluster.tls has no ca_file/cert/key; "
                          f"give them (or --tls-ca-file/--tls-cert/--tls-key)")
    if scheme == "tcp" and tls.enabled and tls.require:
        raise ConfigError(f"{where}: {address} is plain tcp:// but cluster.tls.require is true; "
                          f"use the tls:// address or set require: false")


def _walltime_seconds(walltime) -> int:
    # SLURM's [D-]HH:MM:SS, [MM:]SS
    if not isinstance(walltime, str):
        raise TypeError(walltime)
    days, _, hms = walltime.rpartition("-")
    parts = [int(p) for p in hms.split(":")]
    if not 1 <= len(parts) <= 3 or any(p < 0 for p in parts):
        raise ValueError(walltime)
    seconds = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    return seconds + 86400 * int(days or 0)


def _mapping(d, where: str) -> dict:
    if d is None:
        return {}
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: expected a mapping of fields, got {type(d).__name__} {d!r}")
    return dict(d)


def _reject_unknown(d: dict, cls, where: str) -> None:
    known = [f.name for f in dataclasses.fields(cls) if f.name != "where"]
    for key in d:
        if key not in known:
            raise ConfigError(f"{where}.{key}: unknown field{_did_you_mean(str(key), known)} "
                              f"(known: {', '.join(known)})")


def _did_you_mean(word: str, choices) -> str:
    close = difflib.get_close_matches(str(word), list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _check_type(value, typ, where: str, expected: str) -> None:
    if not isinstance(value, typ):
        raise ConfigError(f"{where}: expected {expected}, got {value!r}")


def _check_int(value, where: str, minimum: int, or_null: bool = False) -> None:
    expected = f"an integer >= {minimum}" + (" or null" if or_null else "")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: expected {expected}, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{where}: must be >= {minimum}, got {value}")
