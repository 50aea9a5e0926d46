"""Quantities as Kubernetes spells them, read exactly (Decimal, never float)."""

from __future__ import annotations

from decimal import Decimal

from kubernetes.utils import parse_quantity

MIB = 1024 * 1024
GIB = 1024 * MIB


def quantity(text: str | int) -> Decimal:
    return Decimal(parse_quantity(text))
