"""Extender configuration: validated, with the bad field named."""

from __future__ import annotations

from pathlib import Path

import pytest

from extender.config import ConfigError, load_config


def test_invalid_extender_config_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "extender.yaml"
    path.write_text("planTimeoutSeconds: -3\n")
    with pytest.raises(ConfigError, match=r"planTimeoutSeconds"):
        load_config(path)
    path.write_text("topologyLevels: [rack]\nweights: {numa: 3}\n")
    assert load_config(path).weights.numa == 3
