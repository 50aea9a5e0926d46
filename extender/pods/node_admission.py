"""Whether kube-scheduler would let a pod onto a node for reasons evictions cannot change: taints it
does not tolerate, a cordoned node, and room for its CPU, memory and one more pod once the victims
are gone. Preemption evicts only on nodes that pass, so no pod is evicted for a preemptor that could
never go there. Pure: Node and Pod API dicts in, facts and answers out.

The rules are the scheduler's own filters (v1.37 `pkg/scheduler/framework/plugins`): TaintToleration
(NoSchedule and NoExecute taints need a toleration), NodeUnschedulable (a cordoned node needs a
toleration of `node.kubernetes.io/unschedulable:NoSchedule`) and NodeResourcesFit (requests, the
largest of init containers, sidecars and pod overhead, against allocatable; pods against `pods`).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from extender.devices.taints import filtering, tolerates
from nativedra.base.kube.units import quantity

UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


HostPort = tuple[str, str, int]  # (protocol, host IP, port), as the scheduler's NodePorts plugin compares them
ANY_IP = "0.0.0.0"  # noqa: S104 - the API's default hostIP: every address of the node


@dataclass(frozen=True)
class Requests:
    """What pods ask of a node: CPU (cores), memory (bytes), how many pods, and host ports."""

    cpu: Decimal = Decimal(0)
    memory: Decimal = Decimal(0)
    pods: int = 0
    host_ports: frozenset[HostPort] = frozenset()

    def plus(self, other: Requests) -> Requests:
        ports = self.host_ports | other.host_ports if other.host_ports else self.host_ports
        return Requests(self.cpu + other.cpu, self.memory + other.memory, self.pods + other.pods, ports)

    def minus(self, other: Requests) -> Requests:
        ports = self.host_ports - other.host_ports if other.host_ports else self.host_ports
        return Requests(self.cpu - other.cpu, self.memory - other.memory, self.pods - other.pods, ports)


NONE = Requests()


def _container_requests(container: dict[str, Any]) -> tuple[Decimal, Decimal]:
    requests = (container.get("resources") or {}).get("requests") or {}
    cpu = requests.get("cpu")
    memory = requests.get("memory")
    return (quantity(cpu) if cpu is not None else Decimal(0), quantity(memory) if memory is not None else Decimal(0))


def pod_requests(pod: dict[str, Any]) -> Requests:
    """What the scheduler counts for the pod: the larger of its containers plus sidecars and each
    init container with the sidecars started before it, plus the pod's overhead."""
    spec = pod.get("spec") or {}
    cpu = memory = Decimal(0)
    for container in spec.get("containers") or []:
        c, m = _container_requests(container)
        cpu, memory = cpu + c, memory + m
    sidecar_cpu = sidecar_memory = Decimal(0)
    init_cpu = init_memory = Decimal(0)
    for container in spec.get("initContainers") or []:
        c, m = _container_requests(container)
        if container.get("restartPolicy") == "Always":  # a sidecar: runs beside the containers
            sidecar_cpu, sidecar_memory = sidecar_cpu + c, sidecar_memory + m
            init_cpu, init_memory = max(init_cpu, sidecar_cpu), max(init_memory, sidecar_memory)
        else:
            init_cpu, init_memory = max(init_cpu, sidecar_cpu + c), max(init_memory, sidecar_memory + m)
    cpu, memory = max(cpu + sidecar_cpu, init_cpu), max(memory + sidecar_memory, init_memory)
    overhead = spec.get("overhead") or {}
    if "cpu" in overhead:
        cpu += quantity(overhead["cpu"])
    if "memory" in overhead:
        memory += quantity(overhead["memory"])
    return Requests(cpu, memory, 1, host_ports(spec))


def host_ports(spec: dict[str, Any]) -> frozenset[HostPort]:
    """The host ports a pod binds, as the scheduler counts them: its containers' and its sidecars'
    (init containers with restartPolicy Always), not those of init containers that finish."""
    sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    return frozenset(
        ((port.get("protocol") or "TCP"), (port.get("hostIP") or ANY_IP), int(port["hostPort"]))
        for container in (*sidecars, *(spec.get("containers") or []))
        for port in container.get("ports") or []
        if port.get("hostPort")
    )


def ports_conflict(wanted: frozenset[HostPort], used: frozenset[HostPort]) -> bool:
    """NodePorts' rule: one protocol and port, and the same address or either on every address."""
    return any(
        protocol == other_protocol and port == other_port and (ip == other_ip or ANY_IP in (ip, other_ip))
        for protocol, ip, port in wanted
        for other_protocol, other_ip, other_port in used
    )


def counts_on_node(pod: dict[str, Any]) -> bool:
    """A pod whose requests the node still carries: bound, not finished, not being deleted (a pod
    being deleted is counted gone, as preemption counts its devices)."""
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase")
    return (
        bool(spec.get("nodeName"))
        and phase not in ("Succeeded", "Failed")
        and not pod["metadata"].get("deletionTimestamp")
    )


@dataclass(frozen=True)
class NodeAdmission:
    """What of a Node decides admission apart from devices and affinity."""

    taints: tuple[dict[str, Any], ...]  # NoSchedule and NoExecute taints only
    allocatable: Requests | None  # None: the node has reported none yet (the scheduler then decides)
    unschedulable: bool

    @property
    def open(self) -> bool:
        """No taint and no cordon: every pod passes (most nodes; asked once per node per decision)."""
        return not self.taints and not self.unschedulable

    @classmethod
    def of(cls, node: dict[str, Any]) -> NodeAdmission:
        spec = node.get("spec") or {}
        allocatable = (node.get("status") or {}).get("allocatable")
        room = None
        if allocatable:
            pods = allocatable.get("pods")
            room = Requests(
                quantity(allocatable["cpu"]) if "cpu" in allocatable else Decimal(0),
                quantity(allocatable["memory"]) if "memory" in allocatable else Decimal(0),
                int(quantity(pods)) if pods is not None else 0,
            )
        taints = tuple(filtering(spec.get("taints")))
        return cls(taints, room, bool(spec.get("unschedulable")))


def refusal(pod_spec: dict[str, Any], node: str, admission: NodeAdmission) -> str | None:
    """Why the scheduler would refuse the pod on the node whatever is evicted, or None."""
    tolerations = pod_spec.get("tolerations") or []
    if admission.unschedulable and not tolerates(tolerations, UNSCHEDULABLE_TAINT):
        return f"node {node} is cordoned (unschedulable)"
    for taint in admission.taints:
        if not tolerates(tolerations, taint):
            return f"node {node} has taint {taint.get('key')}={taint.get('value', '')}:{taint.get('effect')}"
    return None


def members_that_fit(admission: NodeAdmission, requested: Requests, each: Requests, need: int) -> int:
    """How many pods asking `each` fit beside `requested` (at most `need`): CPU and memory only where
    asked, as the scheduler skips a resource a pod does not request, and always one pod slot each.
    Pods asking host ports fit one to a node, and none where a pod that stays binds one of them."""
    if each.host_ports:
        if ports_conflict(each.host_ports, requested.host_ports):
            return 0
        need = min(need, 1)
    allocatable = admission.allocatable
    if allocatable is None:
        return need
    fits = need
    free_cpu, free_memory = allocatable.cpu - requested.cpu, allocatable.memory - requested.memory
    for free, ask in ((free_cpu, each.cpu), (free_memory, each.memory)):
        if ask > 0:
            fits = min(fits, max(0, int(free // ask)))
    return max(0, min(fits, allocatable.pods - requested.pods))
