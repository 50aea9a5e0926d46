"""Which releases mark the pods the extender serves: MutatingAdmissionPolicy is served by default
from 1.36; before, every pod is sent."""

from __future__ import annotations

import pytest

from nativedra.cluster.extender_wiring import marks_pods


@pytest.mark.parametrize(
    ("version", "marked"),
    [("v1.34.4", False), ("v1.35.4", False), ("v1.36.0", True), ("v1.36.2", True), ("v1.37.2", True), ("2.0.0", True)],
)
def test_releases_from_1_36_mark_pods(version: str, marked: bool) -> None:
    assert marks_pods(version) is marked
