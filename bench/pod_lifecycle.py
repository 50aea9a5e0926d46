"""The extender's own CPU per 1-GPU pod, in-process, without HTTP or TLS: the watch events of one
pod's life (its claim and the pod created, the pod updated, its claim allocated, the pod bound and
updated), its /filter and /prioritize decided as the app decides them (body parsed, answer
encoded), and the plans the background planner would make after them.

`python -m bench.pod_lifecycle NODES [PODS]` prints the process CPU per pod on
`testkit.builders.busy_cluster(NODES)`. `python -m bench scheduler` measures the same in a real
extender process beside a real scheduler, HTTP and TLS included.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from typing import Any

from bench.busy_cluster import listed
from extender.plan.config import ExtenderConfig
from extender.plan.decide import Decider
from extender.serve.wire import encode_priorities, filter_result, parse_args
from nativedra.base.gcutil.collector import space_out_collections
from testkit import builders


class Lifecycle:
    """Pods scheduled one after the other onto the free GPUs of the listed cluster."""

    def __init__(self, nodes: int) -> None:
        self.state, self.workload, _ = listed(nodes, None)
        self.decider = Decider(ExtenderConfig())
        self.decider.warm_up(self.state.view())
        self.template = builders.claim_template("one", 1, namespace=self.workload.namespace)
        usage = self.state.view().usage
        self.free = [
            (name, gpu) for name, used in usage.items() for gpu in range(8) if f"gpu-{gpu}" not in used.devices
        ]
        self.version = 10

    def _event(self, event: str, kind: str, obj: dict[str, Any]) -> None:
        obj = copy.deepcopy(obj)  # each watch event decodes a new object
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.state.apply(event, kind, obj)

    def _plan_if_wanted(self) -> None:
        """What the background planner does when an answer came from an older plan."""
        plans = self.decider.plans
        if plans.refresh_wanted.is_set():
            plans.refresh_wanted.clear()
            plans.plan(self.state.view(), None, time.time())

    def one(self, index: int) -> None:
        pod, claim = builders.claimed_pod(f"lifecycle-{index}", self.template, self.workload.namespace)
        self._event("ADDED", "resourceclaims", claim)
        self._event("ADDED", "pods", pod)
        self._event("MODIFIED", "pods", pod)
        body = json.dumps({"Pod": pod, "NodeNames": self.workload.node_names}).encode()
        args = parse_args(body)
        passing, failed, _ = self.decider.filter(self.state.view(), args.pod, args.node_names())
        filter_result(args, passing, failed)
        self._plan_if_wanted()
        args = parse_args(body)
        encode_priorities(self.decider.prioritize(self.state.view(), args.pod, args.node_names()))
        node, gpu = self.free[index]
        builders.bind_to_node(pod, claim, node, [f"gpu-{gpu}"])
        self._event("MODIFIED", "resourceclaims", claim)
        self._event("MODIFIED", "pods", pod)
        self._event("MODIFIED", "pods", pod)
        self._plan_if_wanted()


def cpu_per_pod(nodes: int, pods: int) -> float:
    """Process CPU seconds per pod, the events' copying included (a decoder's work stands for it)."""
    space_out_collections()  # as the extender's process does
    lifecycle = Lifecycle(nodes)
    pods = min(pods, len(lifecycle.free))
    started = time.process_time()
    for index in range(pods):
        lifecycle.one(index)
    return (time.process_time() - started) / pods


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pod_lifecycle", description=__doc__.split("\n\n")[0])
    parser.add_argument("nodes", type=int)
    parser.add_argument("pods", type=int, nargs="?", default=300)
    args = parser.parse_args(argv)
    print(f"{args.nodes} nodes: extender CPU per 1-GPU pod {cpu_per_pod(args.nodes, args.pods) * 1000:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
