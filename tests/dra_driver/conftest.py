"""The `node` fixture: a fresh node's prepare state in a temporary directory; `synced_directories`:
the directories fsynced for an atomic write since the test began, in order."""

from __future__ import annotations

from pathlib import Path

import pytest

from nativedra.base.fsutil import atomic
from tests.dra_driver.claims import Node


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


@pytest.fixture
def synced_directories(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    synced: list[Path] = []
    real = atomic.fsync_directory

    def recorded(directory: Path) -> None:
        synced.append(directory)
        real(directory)

    monkeypatch.setattr(atomic, "fsync_directory", recorded)
    return synced
