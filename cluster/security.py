"""TLS for tls:// clusters: one CA, one cert/key pair used by client, scheduler and workers."""
from __future__ import annotations

from distributed.security import Security

from cluster.config import TLSConfig


def make_security(tls: TLSConfig | None) -> Security | None:
    """Security for every role from `cluster.tls`; None when TLS is not configured."""
    if tls is None or not tls.enabled:
        return None
    pair = {}
    for role in ("client", "scheduler", "worker"):
        pair[f"tls_{role}_cert"] = tls.cert
        pair[f"tls_{role}_key"] = tls.key
    return Security(tls_ca_file=tls.ca_file, require_encryption=tls.require, **pair)
