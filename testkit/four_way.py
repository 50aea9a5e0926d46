"""The same gang scenarios four ways on Kubernetes 1.37: the default scheduler alone, its native
gang scheduling, the nativedra extender, and native gangs with the extender beside them.

Six fake nodes of 8 A100s (fractions off) in racks of 3, 2 and 1 nodes (`nativedra.dev/rack`),
their slices published by the plugin's own builder. Modes:
- default:  the scheduler alone, default feature gates (gang pods carry labels nothing reads);
- native:   the scheduler alone with `GenericWorkload` (beta), `scheduling.k8s.io/v1beta1` served
            and `TopologyAwareWorkloadScheduling` (alpha, for rack constraints); gangs are PodGroups
            and their pods name them in spec.schedulingGroup;
- extender: default gates, the scheduler calls a `nativedra extender`; gangs are nativedra labels
            (`nativedra.dev/topology-required` for the rack);
- both:     the gated cluster of `native` with the extender on; gangs are PodGroups, which the
            extender reads as gangs too.
Default and extender run on a control plane with default gates, native and both on one with the
gates above. The scheduler is restarted for every mode (fresh caches and queues).

Scenarios, each in a fresh namespace:
- two gangs of 4 pods x 8 GPUs, created interleaved (a0, b0, a1, ...): pods of each bound once the
  scheduler has judged every pod, gangs left partly placed, GPUs stranded (held by pods of
  incomplete gangs), seconds from the first create to the first gang whole; then the pods of the
  gang with the most bound (a on a tie) are deleted, and the seconds from the delete to the other
  gang whole are measured, right away or after some seconds of 1-GPU pods coming and going.
- the rack tie: a 2-pod gang required in one rack is created and runs, then a 3-pod one; the racks
  of 3 and 2 nodes tie for the first (native breaks ties at random), and only the rack of 3 fits
  the second. A success is both gangs whole, each in one rack.
- a mixed stream: two gangs of 2 pods x 8 GPUs, each required in one rack, created between twelve
  1-GPU pods (A0, three pods, B0, three pods, A1, ...): 44 of the 48 GPUs, which all fit only if
  the 1-GPU pods leave two whole nodes in each of two racks. Gangs whole, partly placed, rack
  violations, 1-GPU pods bound, seconds until every gang is whole, and pods bound per second.
Bind times come from a watch on the namespace (`testkit.bindings.Bindings`).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.publisher import SlicePublisher
from dra_driver.publishing.slices import build_slices
from extender.plan.config import RACK_LABEL
from extender.pods.gang import TOPOLOGY_REQUIRED
from nativedra.base.kube.names import GPU_CLASS
from nativedra.cluster import ControlPlane, create_fake_node
from nativedra.cluster.components import Features
from nativedra.cluster.controlplane import free_port
from nativedra.cluster.extender_wiring import call_extender, stop_calling_extender
from nativedra.cluster.pki import extender_tls
from nativedra.cluster.waits import unschedulable_message
from nativedra.objects import apply_file, claim_template, device_classes, gpu_pod, request
from testkit.bindings import Bindings
from testkit.extender_harness import (
    ExtenderCluster,
    delete_pods,
    fresh_namespace,
    gang_pods,
    native_gang_pods,
    settled_placement,
)

RACKS = {"rack-a": 3, "rack-b": 2, "rack-c": 1}
GPUS = 8  # per node, and per gang member: a member takes a whole node
MIXED_GANGS = ("ga", "gb")  # 2 pods x 8 GPUs each, one rack each
SINGLES_PER_MEMBER = 3  # 1-GPU pods created after each gang member: 12 in all
SETTLE_S = 60.0  # the longest wait for the scheduler to judge every pod of a scenario
WAITING_S = 60.0  # a waiting gang not whole this long after the first one went counts as never
MODES = ("default", "native", "extender", "both")
NATIVE_GANGS = Features(
    {"GenericWorkload": True, "TopologyAwareWorkloadScheduling": True},
    ("scheduling.k8s.io/v1beta1",),
    "native gang scheduling with rack constraints, measured against the extender",
)


@dataclass(frozen=True)
class Trials:
    """How often each scenario runs. Two-gang trials are given by the seconds of 1-GPU pods coming
    and going between the waiting gang's rejection and the delete (0: about a second after it)."""

    two_gangs_churn_s: tuple[float, ...] = (0.0, 0.0, 20.0)
    rack_ties: int = 8
    mixed_streams: int = 2


@dataclass(frozen=True)
class Mode:
    name: str
    native: bool  # gangs are PodGroups on the gated cluster
    extender: bool  # the scheduler calls the extender

    def gang(
        self, api: client.ApiClient, namespace: str, name: str, size: int, *, members: range, rack: bool
    ) -> list[str]:
        """Members `members` of gang `name` of `size` pods, the way this mode links a gang."""
        if self.native:
            topology = RACK_LABEL if rack else None
            return native_gang_pods(api, namespace, name, size, GPUS, topology=topology, members=members)
        annotations = {TOPOLOGY_REQUIRED: RACK_LABEL} if rack else None
        return gang_pods(api, namespace, name, size, GPUS, annotations=annotations, members=members)


def nodes(api: client.ApiClient) -> dict[str, str]:
    """The six nodes (node -> rack), with the DeviceClasses. Names are new each time: slices of a
    removed node of the same name may still be there, and the garbage collector removes them."""
    apply_file(api, device_classes())
    inventory = load_profile(resolve_profile("a100-8x"))
    run = uuid.uuid4().hex[:4]
    rack_of = {}
    for rack, count in RACKS.items():
        for index in range(count):
            name = f"{rack}-{index}-{run}"
            create_fake_node(api, name, {RACK_LABEL: rack})
            SlicePublisher(api, name).reconcile(build_slices(inventory, PublishConfig(fractions=()), name))
            rack_of[name] = rack
    return rack_of


def remove_nodes(api: client.ApiClient, rack_of: dict[str, str]) -> None:
    core = client.CoreV1Api(api)
    for name in rack_of:
        with contextlib.suppress(client.ApiException):
            core.delete_node(name)


def mode(name: str) -> Mode:
    """One of MODES."""
    return Mode(name, native=name in ("native", "both"), extender=name in ("extender", "both"))


@contextlib.contextmanager
def scheduler(
    plane: ControlPlane, api: client.ApiClient, scratch: Path, mode: Mode
) -> Iterator[ExtenderCluster | None]:
    """A freshly started scheduler, alone or calling a fresh extender (yielded); alone again afterwards."""
    if not mode.extender:
        plane.restart_scheduler({})
        yield None
        return
    scratch.mkdir(parents=True)
    config_file = scratch / "extender.yaml"
    config_file.write_text(yaml.safe_dump({}))
    tls = extender_tls(scratch / "tls")
    extender = ExtenderCluster(plane, api, 0, free_port(), tls, config_file, scratch / "extender.log")
    extender.start_extender()
    try:
        call_extender(plane, extender.port, tls)
        yield extender
    finally:
        extender.kill_extender()
        stop_calling_extender(plane)


def _churn(api: client.ApiClient, namespace: str, seconds: float) -> None:
    """1-GPU pods created and deleted one after another for `seconds`, as a busy cluster's other
    work comes and goes while a gang waits: each is an event that may send the waiting gang back
    through a scheduling attempt (and a longer backoff). Returns once their claims are gone too."""
    claim_template(api, namespace, "churn", [request("gpus", GPU_CLASS, count=1)])
    core = client.CoreV1Api(api)
    names: list[str] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        names.append(f"churn-{len(names)}")
        gpu_pod(api, namespace, names[-1], "churn")
        time.sleep(1)
        core.delete_namespaced_pod(names[-1], namespace, grace_period_seconds=0)
        time.sleep(1)
    delete_pods(api, namespace, names)


def two_gangs(api: client.ApiClient, namespace: str, mode: Mode, churn_s: float) -> dict[str, Any]:
    """One trial of two 4 x 8 gangs, then (after `churn_s` of churn) the first one's pods deleted.
    Besides the figures: which gang went first, which waited, and the scheduler's reason for the
    waiting gang's first pod once every pod was judged."""
    pods: dict[str, list[str]] = {"a": [], "b": []}
    with Bindings(api, namespace) as bindings:
        start = time.perf_counter()
        for index in range(4):
            for gang in pods:
                pods[gang] += mode.gang(api, namespace, gang, 4, members=range(index, index + 1), rack=False)
        placed = settled_placement(api, namespace, pods["a"] + pods["b"], SETTLE_S)
        at = bindings.snapshot()[0]
        counts = {gang: sum(1 for p in names if p in placed) for gang, names in pods.items()}
        whole = [gang for gang, count in counts.items() if count == 4]
        first_whole = min((max(at[p] for p in pods[gang]) - start for gang in whole), default=None)
        first = max(pods, key=lambda gang: (counts[gang], gang == "a"))
        waiting = "b" if first == "a" else "a"
        reason = unschedulable_message(api, namespace, pods[waiting][0])
        _churn(api, namespace, churn_s)
        deleted = time.perf_counter()
        delete_pods(api, namespace, pods[first])
        bindings.wait(set(pods[waiting]), deleted + WAITING_S - time.perf_counter())
        at = bindings.snapshot()[0]
    delete_pods(api, namespace, pods[waiting])  # the next trial starts from free nodes
    done = all(p in at for p in pods[waiting])
    partial = [gang for gang, count in counts.items() if 0 < count < 4]
    return {
        "churn_s": churn_s,
        "first": first,
        "waiting": waiting,
        "waiting_reason": reason,
        "bound": counts,
        "partial_gangs": len(partial),
        "stranded_gpus": sum(counts[gang] for gang in partial) * GPUS,
        "first_whole_s": first_whole,
        "waiting_whole_after_delete_s": max(at[p] for p in pods[waiting]) - deleted if done else None,
    }


def _rack_tie(api: client.ApiClient, namespace: str, mode: Mode, trial: int, rack_of: dict[str, str]) -> dict[str, Any]:
    """One trial of the rack tie: a 2-pod gang, once it runs a 3-pod one, each required in a rack."""
    pair = mode.gang(api, namespace, f"pair{trial}", 2, members=range(2), rack=True)
    settled_placement(api, namespace, pair, SETTLE_S)
    trio = mode.gang(api, namespace, f"trio{trial}", 3, members=range(3), rack=True)
    placed = settled_placement(api, namespace, pair + trio, SETTLE_S)
    racks = [{rack_of[placed[p]] for p in gang if p in placed} for gang in (pair, trio)]
    whole = [all(p in placed for p in gang) for gang in (pair, trio)]
    delete_pods(api, namespace, pair + trio)
    return {
        "both_whole": all(whole),
        "rack_violations": sum(1 for gang_racks in racks if len(gang_racks) > 1),
        "success": all(whole) and all(len(r) == 1 for r in racks),
    }


def _mixed_stream(api: client.ApiClient, namespace: str, mode: Mode, rack_of: dict[str, str]) -> dict[str, Any]:
    """One mixed stream: each gang's members with three 1-GPU pods after each (A0, 3, B0, 3, A1, ...)."""
    claim_template(api, namespace, "single", [request("gpus", GPU_CLASS, count=1)])
    gangs: dict[str, list[str]] = {gang: [] for gang in MIXED_GANGS}
    singles: list[str] = []
    with Bindings(api, namespace) as bindings:
        start = time.perf_counter()
        for index in range(2):
            for gang in MIXED_GANGS:
                gangs[gang] += mode.gang(api, namespace, gang, 2, members=range(index, index + 1), rack=True)
                for _ in range(SINGLES_PER_MEMBER):
                    singles.append(f"single-{len(singles)}")
                    gpu_pod(api, namespace, singles[-1], "single")
        everything = [pod for names in gangs.values() for pod in names] + singles
        placed = settled_placement(api, namespace, everything, SETTLE_S)
        at = bindings.snapshot()[0]
    delete_pods(api, namespace, everything)
    counts = {gang: sum(1 for pod in names if pod in placed) for gang, names in gangs.items()}
    whole = [gang for gang, names in gangs.items() if counts[gang] == len(names)]
    partial = [gang for gang, names in gangs.items() if 0 < counts[gang] < len(names)]
    binds = [at[pod] for pod in everything if pod in at]
    return {
        "gangs_whole": len(whole),
        "partial_gangs": len(partial),
        "stranded_gpus": sum(counts[gang] for gang in partial) * GPUS,
        "rack_violations": sum(1 for gang in whole if len({rack_of[placed[pod]] for pod in gangs[gang]}) > 1),
        "singles_bound": sum(1 for pod in singles if pod in placed),
        "singles": len(singles),
        "all_gangs_whole_s": (
            max(at[pod] for names in gangs.values() for pod in names) - start if len(whole) == len(gangs) else None
        ),
        "pods_per_s": len(binds) / (max(binds) - start) if binds else 0.0,
    }


def _mode(api: client.ApiClient, mode: Mode, rack_of: dict[str, str], trials: Trials) -> Iterator[str | dict[str, Any]]:
    figures: dict[str, Any] = {"two_gangs": [], "rack_tie": [], "mixed": []}
    for trial, churn_s in enumerate(trials.two_gangs_churn_s):
        with fresh_namespace(api, f"two-{mode.name}-{trial}") as namespace:
            result = two_gangs(api, namespace, mode, churn_s)
        figures["two_gangs"].append(result)
        yield f"  two gangs #{trial + 1}: {result}"
    with fresh_namespace(api, f"rack-{mode.name}") as namespace:
        for trial in range(trials.rack_ties):
            figures["rack_tie"].append(_rack_tie(api, namespace, mode, trial, rack_of))
    successes = sum(t["success"] for t in figures["rack_tie"])
    yield f"  rack tie: {successes}/{trials.rack_ties} both gangs whole in one rack each"
    for trial in range(trials.mixed_streams):
        with fresh_namespace(api, f"mixed-{mode.name}-{trial}") as namespace:
            result = _mixed_stream(api, namespace, mode, rack_of)
        figures["mixed"].append(result)
        yield f"  mixed stream #{trial + 1}: {result}"
    yield figures


def run_modes(
    clusters: dict[bool, tuple[ControlPlane, client.ApiClient]], scratch: Path, trials: Trials
) -> Iterator[str | tuple[str, dict[str, Any]]]:
    """Every mode in turn on its cluster (`clusters[native]`: default gates for False, the native
    gates for True): progress lines, and each mode's figures as (mode, figures)."""
    racks = {native: nodes(api) for native, (_, api) in clusters.items()}
    try:
        for name in MODES:
            chosen = mode(name)
            plane, api = clusters[chosen.native]
            yield f"{name}:"
            with scheduler(plane, api, scratch / name, chosen):
                for item in _mode(api, chosen, racks[chosen.native], trials):
                    yield item if isinstance(item, str) else (name, item)
    finally:
        for native, (_, api) in clusters.items():
            remove_nodes(api, racks[native])


def _span(values: list[float | None]) -> str:
    """'0.36 s' for one value, 'min-max s' for several; 'never' if any did not happen."""
    if not values or any(v is None for v in values):
        return "never" if values else "-"
    known = [v for v in values if v is not None]
    low, high = min(known), max(known)
    return f"{low:.2f} s" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f} s"


def table(modes: dict[str, dict[str, Any]]) -> list[str]:
    """The side-by-side table (Markdown), one column per mode."""

    def row(label: str, cell: Callable[[dict[str, Any]], str]) -> str:
        return f"| {label} | " + " | ".join(cell(modes[m]) for m in MODES if m in modes) + " |"

    def placed(figures: dict[str, Any]) -> str:
        return ", ".join(sorted({" + ".join(str(c) for c in t["bound"].values()) for t in figures["two_gangs"]}))

    def ties(figures: dict[str, Any]) -> str:
        trials = figures["rack_tie"]
        violations = sum(t["rack_violations"] for t in trials)
        return f"{sum(t['success'] for t in trials)}/{len(trials)} ({violations} rack violations)"

    def per_trial(key: str) -> Callable[[dict[str, Any]], str]:
        return lambda f: ", ".join(sorted({str(t[key]) for t in f["two_gangs"]}))

    def waiting(churned: bool) -> Callable[[dict[str, Any]], str]:
        return lambda f: _span(
            [t["waiting_whole_after_delete_s"] for t in f["two_gangs"] if bool(t["churn_s"]) == churned]
        )

    def mixed(cell: Callable[[dict[str, Any]], str]) -> Callable[[dict[str, Any]], str]:
        return lambda f: ", ".join(cell(t) for t in f["mixed"]) or "-"

    churn = max((t["churn_s"] for f in modes.values() for t in f["two_gangs"]), default=0.0)
    shown = [m for m in MODES if m in modes]
    return [
        "| 6 nodes x 8 GPUs, racks of 3/2/1 | " + " | ".join(shown) + " |",
        "|---|" + "---|" * len(shown),
        row("two 4 x 8 gangs: pods bound (a + b)", placed),
        row(
            "partly placed gangs / stranded GPUs, per trial",
            lambda f: f"{per_trial('partial_gangs')(f)} / {per_trial('stranded_gpus')(f)}",
        ),
        row("first gang whole, from the first create", lambda f: _span([t["first_whole_s"] for t in f["two_gangs"]])),
        row("waiting gang whole after the first gang's pods are deleted", waiting(False)),
        *([row(f"the same after {churn:.0f} s of 1-GPU pods coming and going", waiting(True))] if churn else []),
        row("2-pod then 3-pod gang, one rack each: both placed", ties),
        row(
            "mixed stream, two 2 x 8 gangs (one rack each) among 12 1-GPU pods: gangs whole / partly placed",
            mixed(lambda t: f"{t['gangs_whole']} / {t['partial_gangs']}"),
        ),
        row("mixed stream: gangs whole but across racks", mixed(lambda t: str(t["rack_violations"]))),
        row("mixed stream: 1-GPU pods bound", mixed(lambda t: f"{t['singles_bound']}/{t['singles']}")),
        row(
            "mixed stream: every gang whole, from the first create",
            lambda f: _span([t["all_gangs_whole_s"] for t in f["mixed"]]),
        ),
        row("mixed stream: pods bound per second", mixed(lambda t: f"{t['pods_per_s']:.1f}")),
    ]
