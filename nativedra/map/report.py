"""`nativedra map`'s picture of a real cluster, from the API alone: fragmentation per node and
domain, gangs with what the extender holds for them and since when, devices kept for preemptors,
and pending GPU pods with the scheduler's reason. Pure: a ClusterMap and the extender's plan in,
lines of at most `width` columns out (long ones wrapped).

The holds are the extender's own plan, made here from the same objects by the same planner
(extender.plan.current): every extender replica derives it from the API alone, so this map shows
what they hold without asking them.
"""

from __future__ import annotations

import textwrap
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from extender.cluster.reservation import Reservation
from extender.pods.model import Gang, HoldClock, Plan
from nativedra.map.clustermap import ClusterMap, NodeView, render_text

NODE_LINES_UP_TO = 64  # GPU-by-GPU lines for clusters this small; larger ones by domain (or a line per node)


@dataclass(frozen=True)
class Fragmentation:
    """Free GPU capacity, and the part of it no whole-node job can use."""

    free: float  # GPUs' worth free
    stranded: float  # of it, on nodes partly in use (an 8-GPU job cannot have it)
    partial_gpus: float  # of it, on GPUs partly in use (fractions, MIG, shares)

    @property
    def share(self) -> float:
        return self.stranded / self.free if self.free else 0.0


def fragmentation(nodes: Sequence[NodeView]) -> Fragmentation:
    free = stranded = partial = 0.0
    for node in nodes:
        node_free = sum(1 - gpu.used for gpu in node.gpus.values())
        free += node_free
        if node_free < len(node.gpus):
            stranded += node_free
        partial += sum(1 - gpu.used for gpu in node.gpus.values() if 0 < gpu.used < 1)
    return Fragmentation(free, stranded, partial)


@dataclass(frozen=True)
class GangRow:
    key: str
    placed: int
    size: int
    state: str  # what the extender does for it, in words


def gang_rows(
    gangs: Sequence[Gang], plans: Mapping[str, Plan], clocks: Mapping[str, HoldClock], now: float
) -> list[GangRow]:
    rows = []
    for gang in gangs:
        plan = plans.get(gang.ref.key)
        clock = clocks.get(gang.ref.key)
        placed = len(gang.placed) + sum(m.done for m in gang.members)
        if plan is None:
            state = "not planned yet"
        elif not plan.feasible:
            state = f"waiting: {plan.reason}"
        elif not plan.slots:
            state = "placed" if placed >= gang.size else "nothing held"
        else:
            age = f" for {now - clock.since:.0f} s" if clock is not None and not clock.expired else ""
            held = sum(plan.slots.values())
            state = f"holding {held} slot(s) in {plan.domain}{age}: {', '.join(sorted(plan.slots))}"
        rows.append(GangRow(gang.ref.key, placed, gang.size, state))
    return sorted(rows, key=lambda row: row.key)


def _fit(line: str, width: int) -> list[str]:
    """A line as is, or wrapped under its own indentation plus two: reasons are read whole."""
    if len(line) <= width:
        return [line]
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    return textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False) or [line[:width]]


def _domains(cluster: ClusterMap, level: str | None) -> dict[str, list[NodeView]]:
    grouped: dict[str, list[NodeView]] = defaultdict(list)
    for node in cluster.nodes:
        if node.gpus:
            grouped[node.labels.get(level, "-") if level else "-"].append(node)
    return dict(sorted(grouped.items()))


def _percent(value: float) -> str:
    return f"{100 * value:.0f}%"


def render_report(
    cluster: ClusterMap,
    gangs: Sequence[GangRow],
    reservations: Sequence[Reservation],
    *,
    level: str | None,
    width: int = 80,
    all_nodes: bool = False,
) -> str:
    """The summary, then GPU by GPU (small clusters; a line per node for larger ones with
    `all_nodes`), domains, gangs, devices kept for preemptors, and pending pods; every line at most
    `width` columns."""
    with_gpus = [n for n in cluster.nodes if n.gpus]
    total = sum(len(n.gpus) for n in with_gpus)
    overall = fragmentation(with_gpus)
    lines = [
        f"{len(with_gpus)} GPU nodes, {total} GPUs, {overall.free:.2f} free "
        f"({_percent(overall.share)} of it on nodes partly in use, {overall.partial_gpus:.2f} on GPUs partly in use)",
        "",
    ]
    if len(with_gpus) <= NODE_LINES_UP_TO:
        text = render_text(ClusterMap(with_gpus, [], cluster.bound, cluster.gangs), (level,) if level else ())
        lines.extend(text.split("\n")[:-2])  # its pending part is below, with the rest
    elif all_nodes:
        lines.append("node              GPUs  free   stranded")
        for node in with_gpus:
            node_free = fragmentation([node])
            lines.append(f"{node.name:<17} {len(node.gpus):>4}  {node_free.free:>5.2f}  {_percent(node_free.share):>8}")
        lines.append("")
    lines.append(f"{level or 'domain'}: GPUs free, stranded (free on nodes partly in use)")
    for domain, nodes in _domains(cluster, level).items():
        part = fragmentation(nodes)
        lines.append(f"  {domain}: {len(nodes)} nodes, {part.free:.2f} free, {_percent(part.share)} stranded")
    lines.append("")
    lines.append(f"gangs: {len(gangs) or 'none'}")
    lines.extend(f"  {row.key} {row.placed}/{row.size}: {row.state}" for row in gangs)
    if reservations:
        lines.append("")
        lines.append("devices kept for preemptors:")
        for reservation in sorted(reservations, key=lambda r: r.preemptor):
            kept_on = ", ".join(sorted(reservation.nodes))
            lines.append(
                f"  {reservation.what} (priority {reservation.priority}): {kept_on}, "
                f"{len(reservation.victims)} pod(s) preempted"
            )
    lines.append("")
    lines.append(f"pending GPU pods: {len(cluster.pending) or 'none'}")
    lines.extend(f"  {pod}: {reason}" for pod, reason in cluster.pending)
    return "\n".join(part for line in lines for part in _fit(line, width))
