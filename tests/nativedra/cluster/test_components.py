"""Component flags and the scheduler configuration of the local control plane."""

from __future__ import annotations

from nativedra.cluster.components import deep_merge


def test_scheduler_config_merge_keeps_base_and_replaces_lists() -> None:
    base = {"clientConnection": {"kubeconfig": "k"}, "extenders": [{"urlPrefix": "a"}]}
    merged = deep_merge(base, {"clientConnection": {"qps": 50}, "extenders": [{"urlPrefix": "b"}]})
    assert merged == {"clientConnection": {"kubeconfig": "k", "qps": 50}, "extenders": [{"urlPrefix": "b"}]}
