"""Errors the kubelet sees: raised anywhere in prepare (claim checks, CDI edits, host devices)
and turned into the gRPC answer's error string in one place."""

from __future__ import annotations

from typing import Any


class PrepareError(RuntimeError):
    """Preparing a claim failed; `reason` labels the metric and the event, the message is for the
    user. `reserved_for` (the claim's status.reservedFor, once it was read) says which pods to tell."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.reserved_for: list[dict[str, Any]] = []
