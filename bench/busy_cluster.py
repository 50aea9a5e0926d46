"""Extender latency on a busy cluster, through the real HTTP app, in a process of its own.

`python -m bench.busy_cluster NODES --json PATH` builds `testkit.builders.busy_cluster(NODES)`, feeds
the real `ClusterState` as the informers do (each kind's LIST decoded from JSON and `replace`d,
then `apply`d watch events), serves `create_app` with uvicorn on 127.0.0.1 in a thread, and asks
/filter and /prioritize over one kept-alive HTTP/1.1 connection, as kube-scheduler does, once
/readyz answers (one figure: from the server's start and the last kind's LIST answer, through
storing that LIST and making the first view and plan, to /readyz answering 200), with one
watch event applied before every call, in two mixes: status updates only (a running pod's claim
or the pod itself, modified, its usage untouched), and a realistic one where half the events free
or take a GPU (a running pod's claim deallocated, or allocated again) on a random node. Each
call's time includes reading and decoding the answer.

Every time is printed as a ratio to the floor measured in the same run: a JSON encode and decode of
the request body the scheduler sends at this size (the pod and every node name). `bench_extender`
runs each size in a fresh interpreter, so its RSS is that size's alone.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import itertools
import json
import random
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import uvicorn
from starlette.types import ASGIApp

from bench.timing import Timing, measure, report
from extender.cluster.informer import LIST_PAGE, list_kind
from extender.cluster.state import ClusterState
from extender.plan.config import ExtenderConfig
from extender.plan.decide import Decider
from extender.serve.app import create_app
from nativedra.base.gcutil.collector import freeze_survivors, space_out_collections
from testkit import builders
from testkit.mixed_cluster import mixed_busy_cluster

VERBS = ("filter", "prioritize")
# New pod shapes, as teams bring claim templates of their own: 2-7 GPUs with a memory selector of
# its own each (every A100 matches them all), so no shape equals one asked about before.
NEW_SHAPES = 50
BURST = 1000  # watch events applied at once, as after a node drain or a large job ending
FLOOR = "JSON round trip"
CALL_TIMEOUT_S = 120.0  # a guard: the slowest call, the first plan after the LIST, takes about 2 s at 5,000 nodes


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def _rss_mib() -> float:
    """This process's resident set, from /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


@dataclass(frozen=True)
class Workload:
    """What the benchmark keeps of the cluster once the state holds it: request bodies, and the
    keys of the objects its watch events modify (the events carry the state's current object)."""

    node_names: list[str]
    bodies: dict[str, bytes]  # pod shape -> the request body the scheduler sends for it
    churn: list[tuple[str, tuple[str, str]]]  # (kind, key), claim then pod, running pod by running pod
    floor_request: dict[str, Any]
    namespace: str
    loaded_s: float = 0.0  # decoding and storing every LIST but the last, as the informers do


LAST_LISTED = "deviceclasses"  # the kind whose LIST answers last in `run`: its answer starts the clock


def listed(
    count: int, last: str | None = None, *, mixed: bool = False
) -> tuple[ClusterState, Workload, Callable[[], None]]:
    """The state after the first LIST of every kind but `last`, and what lists that one: built,
    encoded as the API answers, decoded as the informer decodes it (its `list_kind`). The builder's
    own objects are dropped on return, so the RSS figure counts the state's objects once. `mixed`:
    the cluster of five products publishing the shipped defaults (`testkit.mixed_cluster`)."""
    cluster = mixed_busy_cluster(count) if mixed else builders.busy_cluster(count)
    state = ClusterState(builders.DRIVER)
    answers = {kind: _pages(items) for kind, items in cluster.objects.items()}
    # The builder's objects are not the extender's: frozen before the clock starts, so the first
    # LIST's collection (`built_in_bulk`) does not walk them, as it would find nothing in a real process.
    freeze_survivors()
    started = time.perf_counter()
    for kind, pages in answers.items():
        if kind != last:
            list_kind(_lister(pages), state, kind)
    loaded_s = time.perf_counter() - started
    held_back = answers.pop(last) if last is not None else None

    def list_last() -> None:
        if held_back is not None:
            list_kind(_lister(held_back), state, str(last))

    shapes = {"plain": cluster.plain, "single": cluster.single, "member": cluster.member}
    workload = Workload(
        node_names=cluster.node_names,
        bodies={shape: _body(pod, cluster.node_names) for shape, pod in shapes.items()},
        churn=[
            (kind, _key(obj))
            for pod, claim in cluster.running
            for kind, obj in (("resourceclaims", claim), ("pods", pod))
        ],
        floor_request={"Pod": cluster.single, "NodeNames": cluster.node_names},
        namespace=cluster.namespace,
        loaded_s=loaded_s,
    )
    return state, workload, list_last


def _pages(items: list[dict[str, Any]]) -> list[bytes]:
    """A LIST's answers as the API server sends them when asked LIST_PAGE at a time: compact JSON,
    each page but the last with a continue token (its index here)."""
    pages = [items[start : start + LIST_PAGE] for start in range(0, len(items), LIST_PAGE)] or [[]]
    return [
        orjson.dumps(
            {
                "metadata": {"resourceVersion": "1", "continue": str(index + 1) if index + 1 < len(pages) else ""},
                "items": page,
            }
        )
        for index, page in enumerate(pages)
    ]


def _lister(pages: list[bytes]) -> Callable[..., Any]:
    """What `list_kind` calls: the page its continue token names."""
    return lambda **kwargs: SimpleNamespace(data=pages[int(kwargs.get("_continue") or 0)])


def _body(pod: dict[str, Any], names: list[str]) -> bytes:
    return json.dumps({"Pod": pod, "NodeNames": names}).encode()


USAGE_SHARE = 0.5  # of the realistic mix's events, those that free or take a GPU


class Changes:
    """An endless watch stream of a busy cluster: running pods' claims and pods, in turn, each
    MODIFIED with a new resourceVersion (as status updates arrive), applied as the informer does.
    With `usage_share`, that share of the events instead frees or takes a GPU: a random running
    pod's claim is deallocated (its status emptied), or, if it was, allocated again as it was."""

    def __init__(
        self, state: ClusterState, churn: list[tuple[str, tuple[str, str]]], usage_share: float = 0.0, seed: int = 1
    ) -> None:
        self.state = state
        self.usage_share = usage_share
        self._next = itertools.cycle(churn)
        self._version = itertools.count(2)
        self._claims = [key for kind, key in churn if kind == "resourceclaims"]
        self._random = random.Random(seed)  # noqa: S311 - a reproducible event stream, not a secret
        self._freed: dict[tuple[str, str], Any] = {}  # claim -> its status while allocated

    def _modify(self, kind: str, key: tuple[str, str], **fields: Any) -> None:
        current = self.state.objects[kind][key]
        metadata = {**current["metadata"], "resourceVersion": str(next(self._version))}
        self.state.apply("MODIFIED", kind, {**current, **fields, "metadata": metadata})

    def _free_or_take(self) -> None:
        key = self._random.choice(self._claims)
        if key in self._freed:
            self._modify("resourceclaims", key, status=self._freed.pop(key))
        else:
            self._freed[key] = self.state.objects["resourceclaims"][key].get("status")
            self._modify("resourceclaims", key, status={})

    def apply(self, count: int = 1) -> None:
        for _ in range(count):
            if self.usage_share and self._random.random() < self.usage_share:
                self._free_or_take()
            else:
                self._modify(*next(self._next))


class Client:
    """The scheduler's side: POSTs on one kept-alive HTTP/1.1 connection with TCP_NODELAY, as Go's
    net/http sets it. An answer that is not a 200, or a filter answer with an Error, stops the
    benchmark: it would time the wrong path."""

    def __init__(self, port: int) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=CALL_TIMEOUT_S)
        self.connection.connect()
        self.connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, verb: str, body: bytes) -> Any:
        self.connection.request("POST", f"/{verb}", body, {"Content-Type": "application/json"})
        response = self.connection.getresponse()
        answer = json.loads(response.read())
        if response.status != 200 or (verb == "filter" and answer.get("Error")):
            raise RuntimeError(f"/{verb} answered {response.status}: {str(answer)[:300]}")
        return answer

    def ready(self) -> bool:
        self.connection.request("GET", "/readyz")
        response = self.connection.getresponse()
        response.read()
        return response.status == 200


@contextlib.contextmanager
def serving(app: ASGIApp) -> Iterator[int]:
    """`app` under uvicorn (the extender's server, settings as `nativedra extender` sets them) on a
    loopback port of its own; yields the port."""
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say so, as uvicorn's own
    # listener (from getaddrinfo) does; without it each answer waits 40 ms for a delayed ACK.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield listener.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(30)
        listener.close()


class NewShapes:
    """Pods asking for a number of GPUs no pod asked for before, each delivered by the watches as
    the API creates it (template, claim, pod) and filtered, as the scheduler filters before it
    prioritizes; what is timed is the prioritize that follows."""

    def __init__(self, state: ClusterState, client: Client, workload: Workload) -> None:
        self.state, self.client, self.workload = state, client, workload
        self._shapes = iter(range(NEW_SHAPES))
        self._body = b""

    def deliver(self) -> None:
        shape = next(self._shapes)
        template = builders.claim_template(f"shape-{shape}", 2 + shape % 6, namespace=self.workload.namespace)
        memory = f"device.capacity['{builders.DRIVER}'].memory.compareTo(quantity('{shape + 1}Gi')) >= 0"
        template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [{"cel": {"expression": memory}}]
        pod, claim = builders.claimed_pod(f"shape-{shape}", template, self.workload.namespace)
        for kind, obj in (("resourceclaimtemplates", template), ("resourceclaims", claim), ("pods", pod)):
            self.state.apply("ADDED", kind, obj)
        self._body = _body(pod, self.workload.node_names)
        self.client.call("filter", self._body)

    def prioritize(self) -> None:
        self.client.call("prioritize", self._body)


@dataclass(frozen=True)
class Bounds:
    """How much one figure may cost: at most `calls` calls, and once `budget_s` is spent no more
    than `measure`'s minimum (a guard, should calls ever take seconds again)."""

    calls: int
    budget_s: float


class Figures:
    """The figures of one size, each printed as a line and kept for the results file."""

    def __init__(self, count: int, floor: Timing) -> None:
        self.count, self.floor = count, floor
        self.document: dict[str, Any] = {"nodes": count, "floor": floor.figures(floor)}

    def add(self, key: str, label: str, timing: Timing) -> str:
        self.document[key] = timing.figures(self.floor)
        calls = len(timing.samples_s)
        extra = f"{calls} call{'s' if calls > 1 else ''}"
        return report(f"{self.count} nodes: {label}", timing, self.floor, FLOOR, extra)


def run(count: int, bounds: Bounds, say: Callable[[str], object] = print, *, mixed: bool = False) -> dict[str, Any]:
    """The figures of one size, each line handed to `say` as it is measured. Order matters: cold
    calls first, the burst last."""
    space_out_collections()  # as the extender's process does (extender.cli)
    bare_mib = _rss_mib()
    state, workload, list_last = listed(count, LAST_LISTED, mixed=mixed)
    floor = measure(lambda: json.loads(json.dumps(workload.floor_request)), bounds.calls)
    figures = Figures(count, floor)
    say(figures.add("floor", f"{FLOOR} of the {count}-node request body (the floor)", floor))
    started = time.perf_counter()
    with serving(create_app(state, Decider(ExtenderConfig()))) as port:
        client = Client(port)
        list_last()  # its answer has arrived: what follows is the first answer's wait
        while not client.ready():  # the process reports ready once its first view and plan are made
            time.sleep(0.01)
        ready = Timing((time.perf_counter() - started,))
        say(figures.add("ready", f"server start and the last LIST ({LAST_LISTED}) until /readyz answers 200", ready))
        every_list = Timing((workload.loaded_s + ready.samples_s[0],))
        say(figures.add("list_to_ready", "every LIST's bytes decoded and stored until /readyz answers 200", every_list))
        for verb in VERBS:
            first = measure(partial(client.call, verb, workload.bodies["single"]), 1)
            say(figures.add(f"first_{verb}", f"{verb}, 1-GPU pod, first call once ready", first))
        changes = Changes(state, workload.churn)
        usage_changes = Changes(state, workload.churn, usage_share=USAGE_SHARE)
        labels = {"plain": "pod without claims", "single": "1-GPU pod", "member": "gang member (a pending rack gang)"}
        mixes = {
            "": (changes, "1 watch event before each (status only)"),
            "_usage": (usage_changes, f"1 watch event before each ({USAGE_SHARE:.0%} free or take a GPU)"),
        }
        for suffix, (stream, event_label) in mixes.items():
            for shape, label in labels.items():
                for verb in VERBS:
                    timing = measure(
                        partial(client.call, verb, workload.bodies[shape]),
                        bounds.calls,
                        before=stream.apply,
                        budget_s=bounds.budget_s,
                    )
                    say(figures.add(f"{verb}_{shape}{suffix}", f"{verb}, {label}, {event_label}", timing))
        shapes = NewShapes(state, client, workload)
        new = measure(shapes.prioritize, NEW_SHAPES, before=shapes.deliver, budget_s=bounds.budget_s)
        say(figures.add("prioritize_new_shape", "prioritize, first call for a new pod shape (template)", new))
        burst = measure(lambda: changes.apply(BURST), 1)
        say(figures.add("burst", f"apply a burst of {BURST} watch events", burst))
        after = measure(lambda: client.call("filter", workload.bodies["single"]), 1)
        say(figures.add("filter_after_burst", f"filter, 1-GPU pod, first call after the {BURST} events", after))
    rss_mib = _rss_mib()
    figures.document["rss"] = {"mib": rss_mib, "before_list_mib": bare_mib}
    say(
        f"{count} nodes: extender process RSS {rss_mib:.0f} MiB = {rss_mib / bare_mib:.2f} x "
        f"the same process before the LIST ({bare_mib:.0f} MiB: interpreter, extender and uvicorn loaded)"
    )
    figures.document["objects"] = {kind: len(items) for kind, items in state.objects.items()}
    figures.document["objects"]["resourceslices"] = len(state.slices)
    return figures.document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.busy_cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("nodes", type=int, help="nodes of 8 GPUs, 16 to a rack")
    parser.add_argument("--calls", type=int, default=200, help="calls per figure at most")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds per figure before it stops early")
    parser.add_argument("--json", type=Path, required=True, help="where to write the figures")
    parser.add_argument(
        "--mixed", action="store_true", help="five GPU products publishing the shipped defaults (testkit.mixed_cluster)"
    )
    args = parser.parse_args(argv)
    document = run(args.nodes, Bounds(args.calls, args.budget), lambda line: print(line, flush=True), mixed=args.mixed)
    args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
