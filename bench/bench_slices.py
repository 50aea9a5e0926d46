"""Build + publish the 8x H100 profile with every partition, against the local API server.

Baselines measured in the same run: copying the built specs through JSON (the least work that
produces the same data) for the build, and one LIST of the node's slices for the publisher.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

from kubernetes import client

from bench.timing import Timing, measure, report, write_results
from dra_driver.discovery.simulated import load_profile, resolve_profile
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.publisher import SlicePublisher
from dra_driver.publishing.slices import build_slices
from nativedra.cluster import create_fake_node

FIRST_PUBLISH_NODES = 5
REPUBLISH_RUNS = 30


def run(api: client.ApiClient) -> Iterator[str]:
    inventory = load_profile(resolve_profile("h100-8x"))
    config = PublishConfig()
    specs = build_slices(inventory, config, "bench-h100")
    devices = sum(len(s.get("devices", [])) for s in specs)
    build = measure(lambda: build_slices(inventory, config, "bench-h100"), 200)
    copy = measure(lambda: json.loads(json.dumps(specs)), 200)
    yield report(
        "build slices (8x H100, all partitions)", build, copy, "JSON copy", f"{len(specs)} slices, {devices} devices"
    )

    first_samples, first_writes = [], set()
    for number in range(FIRST_PUBLISH_NODES):
        node = f"bench-h100-{number}"
        create_fake_node(api, node)
        publisher = SlicePublisher(api, node)
        node_specs = build_slices(inventory, config, node)
        start = time.perf_counter()
        first_writes.add(publisher.reconcile(node_specs).writes)
        first_samples.append(time.perf_counter() - start)
    lists = measure(publisher.list_ours, REPUBLISH_RUNS)
    yield report(
        "first publish (create all slices)",
        Timing(tuple(first_samples)),
        lists,
        "one LIST",
        f"API writes per node: {sorted(first_writes)}",
    )

    writes = []
    unchanged = measure(lambda: writes.append(publisher.reconcile(node_specs).writes), REPUBLISH_RUNS)
    yield report(
        "re-publish, nothing changed",
        unchanged,
        lists,
        "one LIST",
        f"{sum(writes)} API writes in {REPUBLISH_RUNS} runs",
    )
    path = write_results(
        "slices",
        {
            "profile": "h100-8x",
            "slices": len(specs),
            "devices": devices,
            "json_copy": copy.figures(copy),
            "build": build.figures(copy),
            "one_list": lists.figures(lists),
            "first_publish": {**Timing(tuple(first_samples)).figures(lists), "writes_per_node": sorted(first_writes)},
            "republish_unchanged": {**unchanged.figures(lists), "writes": sum(writes), "runs": REPUBLISH_RUNS},
        },
    )
    yield f"figures written to {path}"
