"""The pure parts of the objects the demo and tests create: a device request's shape, how a
claim is keyed, and the manifests shipped in the package."""

from __future__ import annotations

import yaml

from nativedra.demo.workloads import EXAMPLES
from nativedra.objects import claim_key, device_classes, request, shipped


def test_a_plain_request_asks_for_count_devices_of_a_class() -> None:
    assert request("gpus", "gpu.example.com", count=2) == {
        "name": "gpus",
        "exactly": {"deviceClassName": "gpu.example.com", "count": 2},
    }


def test_a_selector_and_capacity_are_added_only_when_given() -> None:
    exactly = request("mem", "c", selector="device.attributes['x'].y", capacity={"memory": "10Gi"})["exactly"]
    assert exactly["selectors"] == [{"cel": {"expression": "device.attributes['x'].y"}}]
    assert exactly["capacity"] == {"requests": {"memory": "10Gi"}}


def test_a_claim_is_keyed_as_the_kubelet_names_it() -> None:
    claim = {"metadata": {"namespace": "ns", "uid": "u-1", "name": "train"}}
    assert claim_key(claim) == ("ns", "u-1", "train")


def test_every_shipped_manifest_the_demo_applies_exists_and_parses() -> None:
    for path in [device_classes(), *(shipped(f"examples/{example}") for example in EXAMPLES)]:
        documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
        assert documents, path
        assert all({"apiVersion", "kind", "metadata"} <= set(d) for d in documents), path
