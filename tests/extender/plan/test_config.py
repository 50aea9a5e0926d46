"""Extender configuration: validated, with the bad field named."""

from __future__ import annotations

from pathlib import Path

import pytest

from extender.plan.config import ConfigError, ExtenderConfig, load_config


def test_invalid_extender_config_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "extender.yaml"
    path.write_text("planTimeoutSeconds: -3\n")
    with pytest.raises(ConfigError, match=r"planTimeoutSeconds"):
        load_config(path)
    path.write_text("topologyLevels: [rack]\nweights: {numa: 3}\n")
    assert load_config(path).weights.numa == 3


@pytest.mark.parametrize(
    ("levels", "problem"),
    [
        ("['', rack]", "a level is empty"),
        ("[rack, zone, rack]", "listed more than once: rack"),
        ("['my rack']", "'my rack' is not a node label key"),
        ("['/rack']", "'/rack' is not a node label key"),
    ],
)
def test_topology_levels_must_be_distinct_node_label_keys(tmp_path: Path, levels: str, problem: str) -> None:
    path = tmp_path / "extender.yaml"
    path.write_text(f"topologyLevels: {levels}\n")
    with pytest.raises(ConfigError, match=r"field 'topologyLevels'") as raised:
        load_config(path)
    assert problem in str(raised.value)


def test_label_keys_with_a_prefix_are_levels() -> None:
    levels = ("topology.kubernetes.io/zone", "nativedra.dev/rack", "kubernetes.io/hostname")
    assert ExtenderConfig(topology_levels=levels).topology_levels == levels
