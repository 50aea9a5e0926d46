"""Quantities are read exactly as Kubernetes spells them: binary and decimal suffixes, milli-units,
never through a float."""

from __future__ import annotations

from decimal import Decimal

import pytest

from nativedra.base.kube.units import GIB, MIB, quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1Gi", Decimal(GIB)),
        ("256Mi", Decimal(256 * MIB)),
        ("1G", Decimal(10**9)),
        ("1k", Decimal(1000)),
        ("100m", Decimal("0.1")),
        ("1.5Gi", Decimal(3 * GIB // 2)),
        ("1e3", Decimal(1000)),
        (80, Decimal(80)),
    ],
)
def test_each_spelling_reads_to_its_exact_value(text: str | int, value: Decimal) -> None:
    assert quantity(text) == value


def test_a_large_byte_count_is_exact() -> None:
    """A float would round 2^53 + 1 bytes; a GPU's memory must compare exactly."""
    assert quantity(str(2**53 + 1)) == Decimal(2**53 + 1)
    assert isinstance(quantity("141Gi"), Decimal)


@pytest.mark.parametrize("text", ["", "1GB", "ten", "1.5.0Gi"])
def test_a_malformed_quantity_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        quantity(text)
