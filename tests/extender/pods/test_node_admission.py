"""Node admission as kube-scheduler's filters judge it, for the checks evictions cannot change:
taints and tolerations, a cordoned node, and room for CPU, memory and one more pod."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from extender.devices.taints import tolerates
from extender.pods.node_admission import ANY_IP, NONE, NodeAdmission, Requests, members_that_fit, pod_requests, refusal

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def _container(cpu: str | None = None, memory: str | None = None, **extra: Any) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": "c", "resources": {"requests": requests}, **extra}


def test_a_pods_requests_are_its_containers_its_sidecars_and_the_largest_init_container_and_overhead() -> None:
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [_container("1", "1Gi"), _container("500m")],
            "initContainers": [
                _container("250m", "512Mi", restartPolicy="Always"),  # a sidecar, beside the containers
                _container("4", "256Mi"),  # runs alone after the sidecar started: 4.25 CPUs at once
            ],
            "overhead": {"cpu": "100m", "memory": "64Mi"},
        },
    }
    requests = pod_requests(pod)
    assert requests.cpu == Decimal("4.35")
    assert requests.memory == Decimal(1024 + 512 + 64) * 2**20
    assert requests.pods == 1


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, True),
        ({"key": "nvidia.com/gpu", "value": "present"}, True),
        ({"key": "nvidia.com/gpu", "value": "absent"}, False),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"operator": "Exists"}, True),  # no key, Exists: every taint
        ({"value": "present"}, False),  # no key needs Exists
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_tolerations_match_taints_as_the_api_defines(toleration: dict[str, Any], tolerated: bool) -> None:
    assert tolerates([toleration], GPU_TAINT) is tolerated


def test_a_taint_not_tolerated_and_a_cordon_refuse_the_node_and_name_why() -> None:
    node = {"metadata": {"name": "a"}, "spec": {"taints": [GPU_TAINT, {"key": "soft", "effect": "PreferNoSchedule"}]}}
    admission = NodeAdmission.of(node)
    assert refusal({}, "a", admission) == "node a has taint nvidia.com/gpu=present:NoSchedule"
    assert refusal({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}, "a", admission) is None
    cordoned = NodeAdmission.of({"metadata": {"name": "a"}, "spec": {"unschedulable": True}})
    assert refusal({}, "a", cordoned) == "node a is cordoned (unschedulable)"
    tolerant = {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]}
    assert refusal(tolerant, "a", cordoned) is None


def test_members_fit_by_cpu_memory_and_pod_slots_and_a_resource_not_asked_is_not_checked() -> None:
    admission = NodeAdmission.of(
        {"metadata": {"name": "a"}, "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "10"}}}
    )
    assert admission.allocatable == Requests(Decimal(8), Decimal(16 * 2**30), 10)
    used = Requests(Decimal(5), Decimal(2**30), 3)
    assert members_that_fit(admission, used, Requests(Decimal(1), Decimal(0), 1), 8) == 3  # CPU
    assert members_that_fit(admission, used, Requests(Decimal(0), Decimal(5 * 2**30), 1), 8) == 3  # memory
    assert members_that_fit(admission, used, Requests(pods=1), 8) == 7  # pod slots
    assert members_that_fit(admission, used, Requests(pods=1), 2) == 2  # never more than needed
    full = Requests(Decimal(9), Decimal(0), 3)  # over-committed: none, not a negative count
    assert members_that_fit(admission, full, Requests(Decimal(1), Decimal(0), 1), 8) == 0
    unknown = NodeAdmission.of({"metadata": {"name": "b"}})
    assert members_that_fit(unknown, used, Requests(Decimal(100), Decimal(0), 1), 4) == 4


def _ports(*ports: dict[str, object], sidecar: dict[str, object] | None = None) -> dict[str, object]:
    spec: dict[str, object] = {"containers": [{"name": "main", "ports": list(ports)}]}
    if sidecar is not None:
        spec["initContainers"] = [{"name": "proxy", "restartPolicy": "Always", "ports": [sidecar]}]
        spec["initContainers"].append({"name": "setup", "ports": [{"containerPort": 1, "hostPort": 9999}]})  # type: ignore[attr-defined]
    return spec


def test_host_ports_as_the_scheduler_counts_them_fit_one_pod_to_a_node_and_none_beside_a_holder() -> None:
    """NodePorts: same protocol and port conflict on the same address or where either binds every
    address (0.0.0.0, the default); a sidecar's ports count, a finishing init container's do not."""
    web = pod_requests(
        {
            "spec": _ports(
                {"containerPort": 80, "hostPort": 8080},
                sidecar={"containerPort": 9, "hostPort": 9090, "protocol": "UDP"},
            )
        }
    )
    assert web.host_ports == {("TCP", ANY_IP, 8080), ("UDP", ANY_IP, 9090)}
    admission = NodeAdmission.of({"metadata": {"name": "a"}})
    one = Requests(pods=1, host_ports=frozenset({("TCP", "10.0.0.1", 8080)}))
    assert members_that_fit(admission, NONE, one, 4) == 1, "two members asking one port never share a node"
    assert members_that_fit(admission, web, one, 4) == 0, "0.0.0.0 there takes every address"
    other_ip = Requests(pods=1, host_ports=frozenset({("TCP", "10.0.0.2", 8080)}))
    assert members_that_fit(admission, NONE.plus(one), other_ip, 4) == 1, "another address, no conflict"
    udp = Requests(pods=1, host_ports=frozenset({("UDP", ANY_IP, 8080)}))
    assert members_that_fit(admission, web, udp, 4) == 1, "another protocol, no conflict"
    assert members_that_fit(admission, web.minus(web), one, 4) == 1, "freed with the pod that held it"
