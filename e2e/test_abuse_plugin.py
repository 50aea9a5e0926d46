"""No single pod, request or file takes a GPU away: the real plugin process against the real
control plane, with its checkpoint corrupted, claims named twice or malformed, and a claim that
cannot be prepared reported where the user looks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from nativedra.cluster import wait_for
from nativedra.kubelet_client import prepare
from nativedra.objects import claim_key, gpu_pod
from testkit.dra import CDI_PREFIX, allocated_claim, bad_config_template, spec_files, whole_gpu_claim
from testkit.node_plugin import NodePlugin

pytestmark = pytest.mark.usefixtures("device_classes_applied")


@pytest.fixture
def plugin(h100: NodePlugin) -> NodePlugin:
    return h100


def _devices(response: Any, uid: str) -> list[tuple[str, list[str]]]:
    entry = response.claims[uid]
    assert entry.error == "", entry.error
    return [(d.device_name, list(d.cdi_device_ids)) for d in entry.devices]


def test_a_corrupted_checkpoint_keeps_every_prepared_claims_spec_and_answer(
    api: client.ApiClient, namespace: str, plugin: NodePlugin
) -> None:
    keys = [claim_key(whole_gpu_claim(api, namespace, f"worker-{i}", plugin.node, index=i)) for i in range(6)]
    first = prepare(plugin.dra_socket, "v1", keys)
    answers = {key[1]: _devices(first, key[1]) for key in keys}
    specs = {path.name: path.read_text() for path in spec_files(plugin)}
    assert len(specs) == 6
    checkpoint = plugin.data_dir / "checkpoint.json"
    corruptions: dict[str, Callable[[str], bytes]] = {
        "checksum mismatch": lambda text: text.replace("PrepareCompleted", "PrepareCompleteX").encode(),
        "not UTF-8": lambda _text: bytes(range(256)) * 8,
        "JSON of another shape": lambda _text: b"[]",
    }
    for what, corrupt in corruptions.items():
        plugin.stop()
        checkpoint.write_bytes(corrupt(checkpoint.read_text(errors="replace")))
        plugin.start()  # fails if the plugin exits instead of serving
        assert {path.name: path.read_text() for path in spec_files(plugin)} == specs, f"after {what}"
        again = prepare(plugin.dra_socket, "v1", keys)
        assert {key[1]: _devices(again, key[1]) for key in keys} == answers, f"after {what}"
    assert len(list(plugin.data_dir.glob("checkpoint.json.corrupt-*"))) >= 1


def test_a_claim_named_three_times_is_prepared_once_and_a_malformed_uid_is_refused_cleanly(
    api: client.ApiClient, namespace: str, plugin: NodePlugin
) -> None:
    key = claim_key(whole_gpu_claim(api, namespace, "thrice", plugin.node))
    response = prepare(plugin.dra_socket, "v1", [key, key, key])
    assert list(response.claims) == [key[1]] and len(_devices(response, key[1])) == 1
    bad = [(namespace, f"{key[1]}\n", "thrice"), (namespace, "../../etc/passwd", "thrice")]
    refused = prepare(plugin.dra_socket, "v1", bad)
    for _, uid, _ in bad:
        error = refused.claims[uid].error
        assert f"claim {namespace}/thrice: field uid {uid!r} is not a Kubernetes UID" in error
    assert "Traceback" not in plugin.log.read_text()
    assert [path.name for path in spec_files(plugin)] == [f"{CDI_PREFIX}{key[1]}.yaml"]


def test_a_claim_that_cannot_be_prepared_gets_one_warning_event_on_it_and_its_pod(
    api: client.ApiClient, namespace: str, plugin: NodePlugin
) -> None:
    bad_config_template(api, namespace)
    gpu_pod(api, namespace, "bad-config", "bad-config", node=plugin.node)
    claim = allocated_claim(api, namespace, "bad-config")
    key = claim_key(claim)
    for _ in range(5):  # the kubelet retries
        error = prepare(plugin.dra_socket, "v1", [key]).claims[key[1]].error
        assert "sharing.mps.activeThreadPercentage" in error
    core = client.CoreV1Api(api)

    def warnings() -> list[Any]:
        return [
            e for e in core.list_namespaced_event(namespace).items if e.type == "Warning" and e.reason == "bad_config"
        ]

    wait_for(lambda: len(warnings()) >= 2, 30, "Warning events on the claim and its pod", plugin.log.read_text)
    events = warnings()
    involved = sorted((e.involved_object.kind, e.involved_object.name) for e in events)
    assert involved == [("Pod", "bad-config"), ("ResourceClaim", key[2])], "one event per object despite 5 tries"
    for event in events:
        assert f"claim {namespace}/{key[2]}" in event.message and "activeThreadPercentage" in event.message
        assert event.source.host == plugin.node
    assert next(e for e in events if e.involved_object.kind == "ResourceClaim").involved_object.uid == key[1]
