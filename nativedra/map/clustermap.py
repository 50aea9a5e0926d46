"""A map of who holds which GPU, readable at a glance: per node, per GPU, the pods on it, with
fractions, MIG slices and shares drawn as parts of the GPU, and pending pods with their reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from typing import Any

from kubernetes import client

from dra_driver.publishing.published import DeviceKind, DeviceView, memory_slices_of
from extender.pods.gang import gang_of
from nativedra.base.kube.names import DRIVER_NAME
from nativedra.base.kube.resources import RESOURCE_CLAIMS, RESOURCE_SLICES
from nativedra.base.kube.units import quantity

BAR = 16


@dataclass
class Holding:
    device: str
    kind: DeviceKind
    share: float  # part of the GPU, 0..1
    label: str
    pods: list[str]


@dataclass
class GpuView:
    index: int
    product: str
    numa: int | None
    holdings: list[Holding] = field(default_factory=list)

    @property
    def used(self) -> float:
        return min(1.0, sum(h.share for h in self.holdings))


@dataclass
class NodeView:
    name: str
    labels: dict[str, str]
    gpus: dict[int, GpuView] = field(default_factory=dict)


@dataclass
class ClusterMap:
    nodes: list[NodeView]
    pending: list[tuple[str, str]]  # (namespace/pod, scheduler's reason)
    bound: dict[str, str]  # namespace/pod -> node
    gangs: dict[str, str] = field(default_factory=dict)  # namespace/pod -> gang


def _holding(device: DeviceView, result: dict[str, Any], pods: list[str], gpu_slices: int) -> Holding:
    """How much of its GPU one allocated device takes; `gpu_slices`: the GPU's MIG memory slices."""
    if device.fraction is not None:
        share = device.fraction.numerator / device.fraction.denominator
        return Holding(device.name, device.kind, share, str(device.fraction), pods)
    if device.kind is DeviceKind.MIG:
        # The counter set is published with the devices; unread (pool replaced meanwhile): whole GPU.
        share = device.memory_slices / gpu_slices if gpu_slices else 1.0
        return Holding(device.name, device.kind, share, str(device.mig_profile), pods)
    if device.kind is DeviceKind.SHARE and device.memory_bytes:
        consumed = result.get("consumedCapacity", {})
        used = quantity(consumed.get("memory", "0"))
        return Holding(
            device.name, device.kind, float(used / device.memory_bytes), f"share {consumed.get('memory', '?')}", pods
        )
    return Holding(device.name, device.kind, 1.0, "whole", pods)


def build_map(
    nodes: list[dict[str, Any]], slices: list[dict[str, Any]], claims: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> ClusterMap:
    """Pure: API objects (as dicts) -> map."""
    views = {n["metadata"]["name"]: NodeView(n["metadata"]["name"], n["metadata"].get("labels", {})) for n in nodes}
    devices: dict[tuple[str, str], DeviceView] = {}
    memory_slices: dict[tuple[str, str], int] = {}  # (node, counter set) -> MIG memory slices it offers
    for resource_slice in slices:
        spec = resource_slice["spec"]
        node = spec.get("nodeName")
        if spec["driver"] != DRIVER_NAME or node not in views:
            continue
        for counter_set in spec.get("sharedCounters", []):
            memory_slices[(node, counter_set["name"])] = memory_slices_of(counter_set["counters"])
        for api_device in spec.get("devices", []):
            device = DeviceView.from_api(api_device)
            devices[(node, device.name)] = device
            if device.gpu_index not in views[node].gpus:
                views[node].gpus[device.gpu_index] = GpuView(device.gpu_index, device.product_name, device.numa_node)
    for claim in claims:
        allocation = claim.get("status", {}).get("allocation")
        if not allocation:
            continue
        namespace = claim["metadata"]["namespace"]
        holders = [
            f"{namespace}/{r['name']}" for r in claim["status"].get("reservedFor", []) if r.get("resource") == "pods"
        ]
        for result in allocation["devices"]["results"]:
            held = devices.get((result["pool"], result["device"]))
            if result["driver"] != DRIVER_NAME or held is None:
                continue
            gpu_slices = memory_slices.get((result["pool"], str(held.counter_set)), 0)
            views[result["pool"]].gpus[held.gpu_index].holdings.append(_holding(held, result, holders, gpu_slices))
    pending, bound, gangs = [], {}, {}
    for pod in pods:
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        gang = gang_of(pod, {}, {})
        if gang is not None:
            gangs[key] = gang.key.split("/", 1)[1]
        if pod["spec"].get("nodeName"):
            bound[key] = pod["spec"]["nodeName"]
            continue
        reason = next(
            (c.get("message", "") for c in pod.get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"),
            "not yet considered by the scheduler",
        )
        pending.append((key, reason))
    return ClusterMap(sorted(views.values(), key=lambda v: v.name), sorted(pending), bound, gangs)


def _bar(used: float) -> str:
    filled = round(used * BAR)
    return "[" + "#" * filled + "." * (BAR - filled) + "]"


def _pods(cluster: ClusterMap, pods: list[str]) -> str:
    if not pods:
        return "(claim not in use)"
    return ", ".join(f"{pod} [{cluster.gangs[pod]}]" if pod in cluster.gangs else pod for pod in pods)


def render_text(cluster: ClusterMap, topology_labels: tuple[str, ...] = ()) -> str:
    lines = []
    for node in cluster.nodes:
        if not node.gpus:
            continue
        where = " ".join(f"{key.split('/')[-1]}={node.labels[key]}" for key in topology_labels if key in node.labels)
        lines.append(f"node {node.name}  {where}  ({len(node.gpus)} GPUs, {next(iter(node.gpus.values())).product})")
        for gpu in sorted(node.gpus.values(), key=lambda g: g.index):
            parts = "; ".join(f"{h.label} -> {_pods(cluster, h.pods)}" for h in gpu.holdings) or "free"
            numa = "-" if gpu.numa is None else gpu.numa
            lines.append(f"  gpu-{gpu.index:<2} numa {numa}  {_bar(gpu.used)}  {parts}")
    lines.append("")
    if cluster.pending:
        lines.append("pending pods:")
        lines.extend(
            f"  {pod}{f' [{cluster.gangs[pod]}]' if pod in cluster.gangs else ''}: {reason}"
            for pod, reason in cluster.pending
        )
    else:
        lines.append("pending pods: none")
    return "\n".join(lines)


_COLOURS = {
    DeviceKind.GPU: "#4c78a8",
    DeviceKind.FRACTION: "#f58518",
    DeviceKind.MIG: "#54a24b",
    DeviceKind.SHARE: "#b279a2",
}
GPU_W, GPU_H, NODE_GAP, ROW_H, LABEL_W = 150, 26, 20, 30, 150
COLUMN = 40 + GPU_W + LABEL_W + NODE_GAP


def render_svg(cluster: ClusterMap, topology_labels: tuple[str, ...] = ()) -> str:
    """The same map as a picture: a column per node, a bar per GPU filled by what holds it."""
    nodes = [n for n in cluster.nodes if n.gpus]
    height = 70 + max((len(n.gpus) for n in nodes), default=0) * ROW_H + 30 + 16 * len(cluster.pending)
    width = max(1000, len(nodes) * COLUMN + 20)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="11">',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    for column, node in enumerate(nodes):
        x = 20 + column * COLUMN
        where = " ".join(node.labels[k] for k in topology_labels if k in node.labels)
        out.append(f'<text x="{x}" y="20" font-weight="bold">{escape(node.name)}</text>')
        out.append(
            f'<text x="{x}" y="36" fill="#555">{escape(where)} {escape(next(iter(node.gpus.values())).product)}</text>'
        )
        for row, gpu in enumerate(sorted(node.gpus.values(), key=lambda g: g.index)):
            y = 50 + row * ROW_H
            out.append(f'<text x="{x}" y="{y + 17}">gpu-{gpu.index}</text>')
            out.append(f'<rect x="{x + 40}" y="{y}" width="{GPU_W}" height="{GPU_H}" fill="#eee" stroke="#999"/>')
            offset = 0.0
            for holding in gpu.holdings:
                part = min(holding.share, 1 - offset)
                colour = _COLOURS.get(holding.kind, "#888")
                tip = escape(f"{holding.label}: {_pods(cluster, holding.pods)}")
                out.append(
                    f'<rect x="{x + 40 + offset * GPU_W:.1f}" y="{y}" width="{part * GPU_W:.1f}" height="{GPU_H}" '
                    f'fill="{colour}" stroke="white"><title>{tip}</title></rect>'
                )
                offset += part
            names = ", ".join(p.split("/")[-1] for h in gpu.holdings for p in h.pods)
            out.append(f'<text x="{x + 44 + GPU_W}" y="{y + 17}" fill="#333">{escape(names[:22])}</text>')
    y = height - 16 * len(cluster.pending) - 10
    out.append(f'<text x="20" y="{y}" font-weight="bold">pending: {len(cluster.pending) or "none"}</text>')
    for index, (pod, reason) in enumerate(cluster.pending):
        out.append(f'<text x="20" y="{y + 16 * (index + 1)}" fill="#a00">{escape(pod)}: {escape(reason[:160])}</text>')
    out.append("</svg>")
    return "\n".join(out)


def read_map(api: client.ApiClient) -> ClusterMap:
    core = client.CoreV1Api(api)
    sanitize = api.sanitize_for_serialization
    return build_map(
        [sanitize(n) for n in core.list_node().items],
        RESOURCE_SLICES.list(api)["items"],
        RESOURCE_CLAIMS.list(api)["items"],
        [sanitize(p) for p in core.list_pod_for_all_namespaces().items],
    )
