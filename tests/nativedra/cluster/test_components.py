"""Component flags and the scheduler configuration of the local control plane."""

from __future__ import annotations

from nativedra.cluster.components import DEFAULTS, Features, deep_merge


def test_scheduler_config_merge_keeps_base_and_replaces_lists() -> None:
    base = {"clientConnection": {"kubeconfig": "k"}, "extenders": [{"urlPrefix": "a"}]}
    merged = deep_merge(base, {"clientConnection": {"qps": 50}, "extenders": [{"urlPrefix": "b"}]})
    assert merged == {"clientConnection": {"kubeconfig": "k", "qps": 50}, "extenders": [{"urlPrefix": "b"}]}


def test_the_local_cluster_runs_default_feature_gates_unless_a_test_names_more() -> None:
    assert DEFAULTS.flags() == [] and DEFAULTS.apiserver_flags() == [], "users run defaults, so do we"
    native = Features({"GenericWorkload": True}, ("scheduling.k8s.io/v1beta1",), "native gang scheduling")
    assert native.flags() == ["--feature-gates=GenericWorkload=true"]
    assert native.apiserver_flags() == [
        "--feature-gates=GenericWorkload=true",
        "--runtime-config=scheduling.k8s.io/v1beta1=true",
    ]
