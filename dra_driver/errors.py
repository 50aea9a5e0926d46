"""Errors the kubelet sees: raised anywhere in prepare (claim checks, CDI edits, host devices)
and turned into the gRPC answer's error string in one place."""

from __future__ import annotations


class PrepareError(RuntimeError):
    """Preparing a claim failed; `reason` labels the metric, the message is for the user."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
