"""One preemption decision on a large busy cluster, in process (`python -m bench.preemption_at_scale
NODES`), and what decisions running beside /filter cost it.

The cluster is an admin's: five GPU products (A100, H100, H200 8-GPU nodes, L4 4-GPU nodes, MI300X)
published with the shipped `PublishConfig` (whole GPUs, 1/2, 1/4 and 1/8 fractions, MIG placements
where the GPU has them), zones and racks, CPU and memory allocatable; every node runs a random
number (1 to all) of low-priority 1-GPU pods on random GPUs, each asking some CPU, at one of three
priorities, so no two nodes look alike and every node needs evictions. The state is fed as the
informers feed it (each kind's LIST decoded from JSON bytes, then watch events).

Figures (`bench-results/preemption_at_scale_<NODES>.json`), each over DECISIONS decisions, each
after a watch event (a running pod's claim deallocated and allocated again, so the view is new):
- one decision for a waiting high-priority 8-GPU pod as the leader takes it (`Occupancy.of` from the
  view and the state's node room, then `decide`), p50 / p99 / max, against the floor of the same
  run: taking the view alone;
- /filter's time (`Decider.filter` with every node name, for a 1-GPU pod) over FILTER_CALLS calls
  FILTER_EVERY_S apart, alone and while a thread takes a decision once a second as the leader's loop
  does (handing the interpreter over every 2 ms): the ratio of p99s is what preemption costs the
  scheduler's calls.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import random
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.timing import Timing, measure, write_results
from extender.cluster.state import ClusterState
from extender.plan.config import ExtenderConfig
from extender.plan.decide import Decider
from extender.pods.demand import demand_of
from extender.preempt.preemption_plan import Decision, Occupancy, decide, pod_preemptor
from extender.preempt.preemptor import STEP_EVERY_S, _courteous
from extender.preempt.victim_index import VictimIndex
from nativedra.base.gcutil.collector import freeze_survivors, space_out_collections
from testkit.builders import DRIVER, GPU_CLASS, claim_template, claimed_pod
from testkit.mixed_cluster import ALLOCATABLE, PLACEHOLDER, PRIORITIES, PRODUCTS, node_labels, product_slices

PREEMPTOR_PRIORITY = 1000
DECISIONS = 60
FILTER_CALLS = 300
FILTER_EVERY_S = 0.02  # the scheduler's calls for other pods, between two of which a watch event arrives
NAMESPACE = "busy"


def cluster(count: int, seed: int = 1) -> tuple[dict[str, list[dict[str, Any]]], list[tuple[str, str]]]:
    """Every kind's objects, and the (pod, claim) names of the running pods."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible cluster, not a secret
    products = {profile: product_slices(profile) for profile in PRODUCTS}
    one = claim_template("one", 1, namespace=NAMESPACE)
    eight = claim_template("eight", 8, namespace=NAMESPACE)
    nodes: list[dict[str, Any]] = []
    slices: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    claims: list[dict[str, Any]] = []
    running: list[tuple[str, str]] = []
    for index in range(count):
        name = f"n{index:05d}"
        profile = PRODUCTS[index % len(PRODUCTS)]
        text, gpus = products[profile]
        labels = node_labels(name, index, profile)
        nodes.append({"metadata": {"name": name, "labels": labels}, "status": {"allocatable": dict(ALLOCATABLE)}})
        slices.extend(json.loads(text.replace(PLACEHOLDER, name)))
        for gpu in rng.sample(range(gpus), rng.randint(1, gpus)):
            pod, claim = claimed_pod(f"{name}-gpu-{gpu}", one, NAMESPACE)
            pod["spec"]["nodeName"] = name
            pod["spec"]["priority"] = rng.choice(PRIORITIES)
            pod["spec"]["containers"] = [{"name": "c", "resources": {"requests": {"cpu": "8", "memory": "64Gi"}}}]
            pod["status"]["phase"] = "Running"
            pod["status"]["startTime"] = f"2026-12-0{rng.randint(1, 3)}T0{rng.randint(0, 9)}:00:00Z"
            result = {"request": "gpus", "driver": DRIVER, "pool": name, "device": f"gpu-{gpu}"}
            claim["status"] = {
                "allocation": {"devices": {"results": [result]}},
                "reservedFor": [{"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}],
            }
            pods.append(pod)
            claims.append(claim)
            running.append((pod["metadata"]["name"], claim["metadata"]["name"]))
    waiting, waiting_claim = claimed_pod("big", eight, NAMESPACE)
    waiting["spec"]["priority"] = PREEMPTOR_PRIORITY
    waiting["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    small, small_claim = claimed_pod("small", one, NAMESPACE)
    objects = {
        "nodes": nodes,
        "resourceslices": slices,
        "pods": [*pods, waiting, small],
        "resourceclaims": [*claims, waiting_claim, small_claim],
        "resourceclaimtemplates": [one, eight],
        "deviceclasses": [GPU_CLASS],
        "podgroups": [],
        "jobsets": [],
    }
    return objects, running


def fed(objects: dict[str, list[dict[str, Any]]]) -> ClusterState:
    """The state as the informers leave it: each kind's LIST decoded from JSON bytes."""
    state = ClusterState(DRIVER)
    for kind, items in objects.items():
        state.replace(kind, json.loads(json.dumps({"items": items}).encode())["items"])
    for kind in ClusterState.OPTIONAL_KINDS:
        if kind not in objects:
            state.replace(kind, [])
    return state


class Churn:
    """One watch event at a time: a running pod's claim deallocated, or allocated again."""

    def __init__(self, state: ClusterState, running: list[tuple[str, str]], seed: int = 2) -> None:
        self.state = state
        self.running = running
        self.rng = random.Random(seed)  # noqa: S311 - reproducible events
        self.freed: dict[str, dict[str, Any]] = {}

    def __call__(self) -> None:
        if self.freed and self.rng.random() < 0.5:
            name, status = self.freed.popitem()
            claim = copy.deepcopy(self.state.objects["resourceclaims"][(NAMESPACE, name)])
            claim["status"] = status
        else:
            _, name = self.rng.choice(self.running)
            claim = copy.deepcopy(self.state.objects["resourceclaims"][(NAMESPACE, name)])
            if not claim.get("status"):
                return
            self.freed[name] = claim["status"]
            claim["status"] = {}
        self.state.apply("MODIFIED", "resourceclaims", claim)


INDEX = VictimIndex(DRIVER)  # the leader keeps one for its life


def decision(state: ClusterState, decider: Decider, pause: Callable[[], None] = lambda: None) -> Decision | Any:
    """What the leader's step does for one waiting pod: occupancy from the view, then the decision."""
    view = state.view()
    pod = view.pods[(NAMESPACE, "big")]
    demand = demand_of(pod, view.claims, view.templates, view.classes, DRIVER)
    occupancy = Occupancy.of(view, DRIVER, {}, *state.node_room(), index=INDEX)
    return decide(occupancy, pod_preemptor(pod, demand, view), [], decider.matcher, pause=pause)


def _line(timing: Timing) -> str:
    return f"p50 {timing.p50_ms:.1f} ms, p99 {timing.p99_ms:.1f} ms, max {timing.max_ms:.1f} ms"


def _figures(timing: Timing) -> dict[str, float | int]:
    return {"p50_ms": timing.p50_ms, "p99_ms": timing.p99_ms, "max_ms": timing.max_ms, "samples": len(timing.samples_s)}


def run(count: int, say: Callable[[str], object] = print) -> dict[str, Any]:
    space_out_collections()  # as the extender's process does (extender.cli)
    started = time.perf_counter()
    objects, running = cluster(count)
    state = fed(objects)
    del objects
    freeze_survivors()  # as the state does every REFREEZE_EVENTS watch events
    decider = Decider(ExtenderConfig())
    decider.warm_up(state.view())
    devices = sum(len(node.devices) for node in state.view().nodes.values())
    took = time.perf_counter() - started
    say(f"{count} nodes, {devices} devices, {len(running)} running pods, built and fed in {took:.1f} s")
    churn = Churn(state, running)
    first = decision(state, decider)
    victims, nodes = len(getattr(first, "evicted", ())), sorted(getattr(first, "reserved", {}))
    say(f"first decision: {type(first).__name__}, {victims} victims on {nodes}")
    floor = measure(state.view, DECISIONS, before=churn)
    decisions = measure(lambda: decision(state, decider), DECISIONS, before=churn)
    say(f"one decision after a watch event: {_line(decisions)} (the view alone: p50 {floor.p50_ms:.2f} ms)")
    names = [node["metadata"]["name"] for node in state.objects["nodes"].values()]
    small = state.view().pods[(NAMESPACE, "small")]

    def filtered() -> None:
        decider.filter(state.view(), small, names, now=time.time())

    def paced() -> None:
        churn()
        time.sleep(FILTER_EVERY_S)

    alone = measure(filtered, FILTER_CALLS, before=paced)
    stop = threading.Event()
    taken: list[float] = []

    def lead() -> None:
        """As the leader's loop: a decision, then the rest of its step's second."""
        while not stop.is_set():
            started = time.perf_counter()
            decision(state, decider, pause=_courteous())
            taken.append(time.perf_counter() - started)
            stop.wait(max(0.0, STEP_EVERY_S - taken[-1]))

    thread = threading.Thread(target=lead, daemon=True)
    thread.start()
    try:
        beside = measure(filtered, FILTER_CALLS, before=paced)
    finally:
        stop.set()
        thread.join()
    ratio = beside.p99_ms / alone.p99_ms
    say(
        f"/filter every {FILTER_EVERY_S * 1000:.0f} ms alone: {_line(alone)}; while the leader decides once a second "
        f"({len(taken)} decisions): {_line(beside)} = {ratio:.2f} x at p99"
    )
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": f"python -m bench.preemption_at_scale {count}",
        "nodes": count,
        "devices": devices,
        "running_pods": len(running),
        "decision": _figures(decisions),
        "view_floor": _figures(floor),
        "filter_alone": _figures(alone),
        "filter_beside_decisions": _figures(beside),
        "filter_p99_ratio": ratio,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.preemption_at_scale", description=__doc__)
    parser.add_argument("nodes", type=int, nargs="?", default=10_000)
    args = parser.parse_args(argv)
    document = run(args.nodes)
    path: Path = write_results(f"preemption_at_scale_{args.nodes}", document)
    print(f"figures in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
