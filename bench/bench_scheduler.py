"""Real kube-scheduler throughput on a busy cluster, without the extender and with it, in one run.

Two sizes, 100 and 500 fake nodes of 8 A100s (fractions off), 16 to a rack (`nativedra.dev/rack`),
and 5,000 on its own (`python -m bench scheduler_5000`), their ResourceSlices published from this
process by the plugin's own builder and publisher. Before anything is measured the cluster is made
busy: every node outside the whole racks the gangs need runs one pod holding all 8 of its GPUs (68%
of the GPUs at either size). Those pods are bound directly and their claims allocated by writing the
claim status as the scheduler's allocator would (devices, node selector, reservedFor the pod). That
costs one pod and one claim per node instead of a scheduling pass, and both modes start from exactly
the same objects: no scheduler's choices decide what the measured one starts from.

Each size runs three workloads, each in a fresh namespace that is deleted (and waited out) before
the next, so every workload starts from the same busy state: with the scheduler alone, and on the
same nodes with the scheduler restarted to call a `nativedra extender` process over mutual TLS,
wired as `testkit.extender_harness` wires it (which also sets percentageOfNodesToScore: 100; at these
sizes the scheduler alone looks at every node anyway). The scheduler is restarted for both modes, so
both start with fresh caches and queues, and both lift its client rate limit (CLIENT), as the
benchmark plane lifts kube-controller-manager's (CONTROLLER_MANAGER_CLIENT). The modes take turns
over two rounds (ROUND_ORDERS); a ratio is of pods per second pooled over the rounds, and each
round's ratio is given beside it.

- gangs: gangs of 8 pods x 8 GPUs requiring one rack; per gang the seconds from its first pod's
  creation to its last member bound, how many complete within GANG_WAIT_S, how many end partly
  placed, and how many complete ones sit in one rack (without the extender nothing asks for one).
- pods: 1-GPU pods created by WORKERS threads; pods/s from the first create to the last bind.
- plain pods: as many pods with no claim and no gang, the same way: the shipped wiring never sends
  them to the extender, so with it they should schedule as fast as without.

Bind times come from a watch on the namespace rather than from polled LISTs, which would load the
API server the scheduler shares the two cores with. Figures go to bench-results/scheduler.json.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.busy_nodes import CLIENT, GPUS, RACK_SIZE, WORKERS, busy_cluster, scheduler, workload_namespace
from bench.cpu_use import counted, counters, cpu_use
from bench.timing import Timing, write_results
from extender.plan.config import RACK_LABEL
from extender.pods.gang import TOPOLOGY_REQUIRED
from nativedra.base.kube.names import GPU_CLASS
from nativedra.cluster import ControlPlane
from nativedra.cluster.controlplane import COMPONENTS
from nativedra.objects import apply_file, claim_template, device_classes, gpu_pod, request
from testkit.bindings import Bindings
from testkit.extender_harness import ExtenderCluster, gang_pods

GANG_SIZE = 8  # members of GPUS each: a member takes a whole node
GANG_WAIT_S = 120.0  # a gang that never completes (no room, or a deadlock) costs this much, no more
PODS_WAIT_S = 300.0
MODES = ("without", "with")
# The modes take turns as without-with, then with-without: whatever drifts over a run (etcd's size,
# the API server's caches, the machine's other load) weighs on both alike, not on the second. At
# 5,000 nodes, single runs of one order gave 0.71-1.18 x for the same tree (docs/performance.md).
ROUND_ORDERS = (("without", "with"), ("with", "without"))
# kube-controller-manager's client rate, lifted the same way for the whole benchmark plane: at its
# default (20 requests/s) the controller making each pod's claim from its template (two writes per
# pod) capped both modes at ~10 pods/s, so the ratio said nothing of the scheduler's and the
# extender's cost.
CONTROLLER_MANAGER_CLIENT = ("--kube-api-qps=1000", "--kube-api-burst=2000")


@dataclass(frozen=True)
class Size:
    nodes: int
    pods: int  # 1-GPU pods of the throughput workload
    gangs: int

    @property
    def free_racks(self) -> int:
        """Whole racks left free for the gangs: two gangs of 8 nodes fill a rack of 16."""
        return -(-self.gangs * GANG_SIZE // RACK_SIZE)

    @property
    def busy_nodes(self) -> int:
        return self.nodes - self.free_racks * RACK_SIZE


# At 100 nodes the workloads shrink to fit the 32 free nodes (256 GPUs).
SIZES = (Size(100, pods=200, gangs=4), Size(500, pods=1000, gangs=20))
# `python -m bench scheduler_5000`: where the scheduler alone scores about a tenth of the nodes
# (its adaptive percentageOfNodesToScore) and the extender's wiring has it look at all of them.
LARGE = Size(5000, pods=500, gangs=20)


def _gangs(api: client.ApiClient, namespace: str, count: int, rack_of: dict[str, str]) -> dict[str, Any]:
    """`count` gangs requiring one rack, created one after another; waits until all are bound or
    GANG_WAIT_S after the first was created."""
    annotations = {TOPOLOGY_REQUIRED: RACK_LABEL}
    started: dict[str, float] = {}
    members: dict[str, list[str]] = {}
    with Bindings(api, namespace) as bindings:
        for index in range(count):
            gang = f"g{index:02d}"
            started[gang] = time.perf_counter()
            members[gang] = gang_pods(api, namespace, gang, GANG_SIZE, GPUS, annotations=annotations)
        first = min(started.values())
        bindings.wait({name for names in members.values() for name in names}, first + GANG_WAIT_S - time.perf_counter())
        at, node = bindings.snapshot()
    placed = {gang: [name for name in names if name in at] for gang, names in members.items()}
    complete = [gang for gang, names in placed.items() if len(names) == GANG_SIZE]
    seconds = Timing(tuple(max(at[name] for name in members[gang]) - started[gang] for gang in complete))
    return {
        "gangs": count,
        "complete": len(complete),
        "partial": sum(1 for names in placed.values() if 0 < len(names) < GANG_SIZE),
        "in_one_rack": sum(1 for gang in complete if len({rack_of[node[name]] for name in members[gang]}) == 1),
        "p50_s": seconds.p50_ms / 1000 if complete else None,
        "max_s": seconds.max_ms / 1000 if complete else None,
    }


def _plain_pod(api: client.ApiClient, namespace: str, name: str) -> None:
    """A pod with no claim and no gang: what most of a cluster's pods are (DNS, web, batch)."""
    spec = {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}], "terminationGracePeriodSeconds": 0}
    client.CoreV1Api(api).create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": spec})


def _pods(api: client.ApiClient, namespace: str, count: int, gpus: bool = True) -> dict[str, Any]:
    """`count` 1-GPU pods (or, without `gpus`, pods with no claim) from WORKERS threads; pods/s from
    the first create to the last bind, or pods bound per second of PODS_WAIT_S if some are still
    pending by then."""
    if gpus:
        claim_template(api, namespace, "one", [request("gpus", GPU_CLASS, count=1)])
    names = [f"p{index:04d}" for index in range(count)]
    create = (
        (lambda name: gpu_pod(api, namespace, name, "one")) if gpus else (lambda name: _plain_pod(api, namespace, name))
    )
    with Bindings(api, namespace) as bindings, ThreadPoolExecutor(WORKERS) as pool:
        start = time.perf_counter()
        list(pool.map(create, names))
        created = time.perf_counter() - start  # near `seconds`, the client and not the scheduler set the pace
        bindings.wait(set(names), start + PODS_WAIT_S - time.perf_counter())
        at = bindings.snapshot()[0]
    bound = [at[name] for name in names if name in at]
    seconds = (max(bound) if len(bound) == count else start + PODS_WAIT_S) - start
    return {
        "pods": count,
        "bound": len(bound),
        "seconds": seconds,
        "created_s": created,
        "pods_per_s": len(bound) / seconds,
    }


def _size(
    plane: ControlPlane, api: client.ApiClient, scratch: Path, size: Size
) -> Generator[str, None, dict[str, Any]]:
    """Every workload in both modes, round after round, on one busy cluster of `size`; its lines,
    then its figures (per workload and mode, one result per round)."""
    figures: dict[str, Any] = {
        "nodes": size.nodes,
        "busy_gpu_fraction": size.busy_nodes / size.nodes,
    }
    with busy_cluster(api, size.nodes, size.free_racks * RACK_SIZE, f"s{size.nodes}") as (rack_of, _):
        workloads = _workloads(api, size, rack_of)
        figures.update({workload: {mode: [] for mode in MODES} for workload in workloads})
        yield f"{size.nodes} nodes, {size.busy_nodes} of them busy ({size.busy_nodes / size.nodes:.0%} of the GPUs)"
        for round_index, order in enumerate(ROUND_ORDERS, start=1):
            for mode in order:
                config: dict[str, Any] | None = None if mode == "without" else {}
                with scheduler(plane, api, scratch / f"{size.nodes}-{mode}-{round_index}", config) as extender:
                    results = {
                        workload: _measured(plane, api, extender, f"{workload.replace('_', '-')}-{mode}", workload_run)
                        for workload, workload_run in workloads.items()
                    }
                for workload, result in results.items():
                    figures[workload][mode].append(result)
                pods, plain, gangs = results["pods"], results["plain_pods"], results["gangs"]
                yield f"  round {round_index}, {mode:<7} extender: {_describe_pods(pods)}; {_describe_gangs(gangs)}"
                yield f"  round {round_index}, {mode:<7} extender: {_describe_pods(plain, 'pods without claims')}"
                yield f"  round {round_index}, {mode:<7} extender: per 1-GPU pod: {_describe_spent(pods)}"
    for workload, what in (("pods", "1-GPU pods"), ("plain_pods", "pods without claims (never sent to the extender)")):
        runs = figures[workload]
        rates = {mode: _pooled_rate(runs[mode]) for mode in MODES}
        runs["ratio"] = rates["with"] / rates["without"]
        runs["round_ratios"] = [
            w["pods_per_s"] / wo["pods_per_s"] for wo, w in zip(runs["without"], runs["with"], strict=True)
        ]
        each = ", ".join(f"{ratio:.2f}" for ratio in runs["round_ratios"])
        yield f"  {size.pods} {what}: {runs['ratio']:.2f} x the scheduler alone (round by round: {each})"
    return figures


def _workloads(
    api: client.ApiClient, size: Size, rack_of: dict[str, str]
) -> dict[str, Callable[[str], dict[str, Any]]]:
    """Each workload, run in the namespace it is given."""
    return {
        "gangs": lambda namespace: _gangs(api, namespace, size.gangs, rack_of),
        "pods": lambda namespace: _pods(api, namespace, size.pods),
        "plain_pods": lambda namespace: _pods(api, namespace, size.pods, gpus=False),
    }


def _measured(
    plane: ControlPlane,
    api: client.ApiClient,
    extender: ExtenderCluster | None,
    prefix: str,
    workload: Callable[[str], dict[str, Any]],
) -> dict[str, Any]:
    """One workload's figures in a fresh namespace, with what it cost under `spent`."""
    with workload_namespace(api, prefix) as namespace, _spent(plane, extender) as spent:
        result = workload(namespace)
    result["spent"] = spent
    return result


def _pooled_rate(runs: list[dict[str, Any]]) -> float:
    """Pods bound per second over all rounds of one mode: every round weighs by its length."""
    bound: int = sum(run["bound"] for run in runs)
    seconds: float = sum(run["seconds"] for run in runs)
    return bound / seconds


@contextlib.contextmanager
def _spent(plane: ControlPlane, extender: ExtenderCluster | None) -> Iterator[dict[str, Any]]:
    """What one workload cost: CPU seconds of the plane's processes, of the extender's if any and of
    this one (the clients and the watch); the API server's writes and admission time; the
    scheduler's attempts and their time; the extender's answers and their time. Filled when the
    block ends."""
    pids = {proc.name: proc.pid for proc in plane.supervisor.processes if proc.name in COMPONENTS}
    reads = {
        "apiserver": lambda: _apiserver_counters(plane.metrics("apiserver")),
        "scheduler": lambda: _scheduler_counters(plane.metrics("scheduler")),
    }
    if extender is not None and extender.process is not None:
        pids["extender"] = extender.process.pid
        reads["extender"] = lambda: _extender_counters(extender.metrics())
    pids["bench"] = os.getpid()
    figures: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        figures["cpu_s"] = stack.enter_context(cpu_use(pids))
        for name, read in reads.items():
            figures[name] = stack.enter_context(counted(read))
        yield figures


def _apiserver_counters(text: str) -> dict[str, float]:
    """Writes by resource, and the seconds admission took (mutating and validating steps)."""
    writes = counters(text, "apiserver_request_total", ("verb", "resource"))
    seconds = counters(text, "apiserver_admission_step_admission_duration_seconds_sum", ("type",))
    return {
        **{key: value for key, value in writes.items() if key.split("/")[0] in ("POST", "PUT", "PATCH", "DELETE")},
        **{f"admission {step} seconds": value for step, value in seconds.items()},
    }


def _scheduler_counters(text: str) -> dict[str, float]:
    """Attempts by result, and the seconds they and their scheduling algorithm took."""
    attempts = "scheduler_schedule_attempts_total"
    seconds = {
        "attempt seconds": "scheduler_scheduling_attempt_duration_seconds_sum",
        "algorithm seconds": "scheduler_scheduling_algorithm_duration_seconds_sum",
    }
    return {
        **{f"attempts {result}": value for result, value in counters(text, attempts, ("result",)).items()},
        **{key: sum(counters(text, name, ()).values()) for key, name in seconds.items()},
    }


def _extender_counters(text: str) -> dict[str, float]:
    """Answers by verb and path, and the seconds spent answering by verb."""
    answers = counters(text, "nativedra_extender_requests_total", ("verb", "path"))
    seconds = counters(text, "nativedra_extender_request_seconds_sum", ("verb",))
    return {**answers, **{f"{verb} seconds": value for verb, value in seconds.items()}}


def _describe_spent(pods: dict[str, Any]) -> str:
    """CPU milliseconds per pod, busiest process first; then per pod, what the counters grew by:
    scheduling attempts and extender answers as counts, seconds as milliseconds."""
    spent, count = pods["spent"], pods["pods"]
    cpu = sorted(spent["cpu_s"].items(), key=lambda item: -item[1])
    parts = ["CPU " + ", ".join(f"{name} {seconds * 1000 / count:.1f} ms" for name, seconds in cpu)]
    for what in ("apiserver", "scheduler", "extender"):
        if what in spent:
            per_pod = (
                f"{key.removesuffix(' seconds')} {value * 1000 / count:.1f} ms"
                if key.endswith(" seconds")
                else f"{key} {value / count:.2f}"
                for key, value in sorted(spent[what].items())
            )
            parts.append(f"{what}: " + ", ".join(per_pod))
    return "; ".join(parts)


def _describe_pods(pods: dict[str, Any], what: str = "1-GPU pods") -> str:
    late = "" if pods["bound"] == pods["pods"] else f" (only {pods['bound']} bound in {PODS_WAIT_S:.0f} s)"
    return f"{pods['pods']} {what} at {pods['pods_per_s']:.1f} pods/s (all created in {pods['created_s']:.1f} s){late}"


def _describe_gangs(gangs: dict[str, Any]) -> str:
    times = f"p50 {gangs['p50_s']:.1f} s, max {gangs['max_s']:.1f} s" if gangs["complete"] else "no time"
    return (
        f"{gangs['complete']}/{gangs['gangs']} gangs complete ({times}), {gangs['partial']} partly placed, "
        f"{gangs['in_one_rack']} in one rack"
    )


def run(api: client.ApiClient, plane: ControlPlane) -> Iterator[str]:
    return run_sizes(api, plane, SIZES, "scheduler")


def run_large(api: client.ApiClient, plane: ControlPlane) -> Iterator[str]:
    return run_sizes(api, plane, (LARGE,), "scheduler_5000")


def run_sizes(api: client.ApiClient, plane: ControlPlane, sizes: tuple[Size, ...], name: str) -> Iterator[str]:
    document: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": f"python -m bench {name}",
        "cpus": os.cpu_count(),
        "rack_size": RACK_SIZE,
        "gang_wait_s": GANG_WAIT_S,
        "scheduler_client": CLIENT["clientConnection"],
        "controller_manager_client": list(CONTROLLER_MANAGER_CLIENT),
        "sizes": {},
    }
    apply_file(api, device_classes())
    with tempfile.TemporaryDirectory(prefix="nativedra-bench-") as scratch:
        for size in sizes:
            document["sizes"][str(size.nodes)] = yield from _size(plane, api, Path(scratch), size)
    yield f"figures written to {write_results(name, document)}"
