"""Quantities as Kubernetes spells them, read exactly (Decimal, never float)."""

from __future__ import annotations

import functools
from decimal import Decimal

from kubernetes.utils import parse_quantity

MIB = 1024 * 1024
GIB = 1024 * MIB


# Distinct quantity strings remembered: a cluster spells a few hundred ("8", "64Gi", a GPU's memory)
# across tens of thousands of pods, claims and devices; past this, the least used are parsed again.
QUANTITIES_KEPT = 4096


def quantity(text: str | int) -> Decimal:
    return _parsed(text) if isinstance(text, str) else Decimal(parse_quantity(text))


@functools.lru_cache(maxsize=QUANTITIES_KEPT)
def _parsed(text: str) -> Decimal:
    """Decimals are immutable: one object serves every reader of the same text."""
    return Decimal(parse_quantity(text))
