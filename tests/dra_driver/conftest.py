"""The `node` fixture: a fresh node's prepare state in a temporary directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.dra_driver.claims import Node


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)
