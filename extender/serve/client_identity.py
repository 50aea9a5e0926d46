"""Only the scheduler may ask: a certificate from the client CA is not enough on its own.

The CA that signs the scheduler's client certificate may sign other leaves too (with
`extender.tls.generate` one Helm CA signs the extender's own serving certificate, and Helm's
genSignedCert gives every leaf both serverAuth and clientAuth), and whoever may read Secrets in the
extender's namespace holds that serving key. So once the handshake has verified the chain, the
connection is kept only when its certificate names an accepted identity (subject CN, DNS or URI
SAN); otherwise it is closed before any request is read, logged and counted.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_IDENTITIES = "kube-scheduler"
PeerCertificate = dict[str, Any]  # ssl.SSLSocket.getpeercert(): the verified certificate's fields


def parse_identities(text: str) -> frozenset[str]:
    """`--client-identities`: comma-separated names, at least one (argparse type)."""
    names = frozenset(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise argparse.ArgumentTypeError("names no identity: give the scheduler's CN or SAN")
    return names


def identities(peer: PeerCertificate) -> frozenset[str]:
    """The names a verified certificate stands for: its subject CNs and its DNS and URI SANs."""
    common_names = {value for rdn in peer.get("subject", ()) for key, value in rdn if key == "commonName"}
    alternative = {value for kind, value in peer.get("subjectAltName", ()) if kind in ("DNS", "URI")}
    return frozenset(common_names | alternative)


@dataclass(frozen=True)
class AcceptedClients:
    names: frozenset[str]

    def refusal(self, peer: PeerCertificate | None) -> str | None:
        """Why this connection's certificate may not ask (None: it may)."""
        if not peer:
            return "no verified client certificate"
        presented = identities(peer)
        if presented & self.names:
            return None
        shown = ", ".join(sorted(presented)) or "no CN or SAN"
        return f"client certificate names {shown}, none of {', '.join(sorted(self.names))} (--client-identities)"


Refused = Callable[[str, object], None]


def identity_checked(protocol: type[Any], accepted: AcceptedClients, refused: Refused) -> type[Any]:
    """`protocol` (uvicorn's HTTP protocol class) that aborts connections `accepted` refuses.
    The base sees the connection made and lost as usual, and never any byte of a refused one."""

    class IdentityChecked(protocol):  # type: ignore[misc]
        _refused = False

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            reason = accepted.refusal(transport.get_extra_info("peercert"))
            if reason is not None:
                self._refused = True
                refused(reason, transport.get_extra_info("peername"))
                transport.abort()

        def data_received(self, data: bytes) -> None:
            if not self._refused:
                super().data_received(data)

    IdentityChecked.__name__ = f"IdentityChecked{protocol.__name__}"
    return IdentityChecked
