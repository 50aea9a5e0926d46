"""The device metadata documents (KEP-5304): paths, schema and the exact bytes a consumer reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dra_driver.errors import PrepareError
from dra_driver.kubelet.device_metadata import (
    AllocatedDevice,
    ClaimIdentity,
    claim_metadata,
    render,
    stream_text,
)
from nativedra.base.kube.names import DRIVER_NAME
from tests.dra_driver.claims import NODE, PUBLISHED

UID = "0b6f4a3e-2a41-4c4e-9a55-2f1c1d2e3f40"
# Written by k8s.io/dynamic-resource-allocation v0.37.2's own encoder for metadata files
# (api/metadata/install scheme, PrettySerializer, v1beta1 then v1alpha1, a newline after each:
# what kubeletplugin/metadata.go encodeMetadataStream does) for the claim of `test_same_bytes...`.
GO_FIXTURE = Path(__file__).parent.parent / "data" / "device-metadata-go-v0.37.2.json"


def objects(text: str) -> list[dict[str, Any]]:
    """Decode a JSON stream the way a consumer does: object after object."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while at < len(text):
        value, at = decoder.raw_decode(text, at)
        found.append(value)
        while at < len(text) and text[at].isspace():
            at += 1
    return found


def published(name: str) -> AllocatedDevice:
    return AllocatedDevice("gpus", NODE, name, PUBLISHED[name].api["attributes"])


def test_same_bytes_as_the_upstream_helper_writes_for_the_same_claim() -> None:
    attributes: dict[str, dict[str, Any]] = {
        "type": {"string": "gpu"},
        "index": {"int": 3},
        "migCapable": {"bool": True},
        "driverVersion": {"version": "580.65.6"},
        "productName": {"string": "NVIDIA <H100> & co é"},  # Go escapes <, > and & but not é
        "resource.kubernetes.io/pciBusID": {"string": "0000:3b:00.0"},
        "numaNodes": {"ints": [0, 1]},
    }
    identity = ClaimIdentity("team-a", "trainer-gpu-x7k2p", UID, "gpu")
    devices = [
        AllocatedDevice("gpus/large", "node-a", "gpu-3", attributes),
        AllocatedDevice("gpus/large", "node-a", "gpu-4", {}),
    ]
    assert stream_text(identity, "gpus/large", devices, DRIVER_NAME) == GO_FIXTURE.read_text()
    [gpus] = claim_metadata(identity, devices, DRIVER_NAME)
    kept = json.loads(json.dumps(gpus.document, sort_keys=True))  # as the checkpoint keeps it
    assert render(kept) == GO_FIXTURE.read_text(), "restored from the checkpoint, the same bytes"


def test_a_template_claim_gets_one_file_per_request_under_its_pod_claim_name() -> None:
    identity = ClaimIdentity.of(
        {
            "metadata": {
                "namespace": "team-a",
                "name": "trainer-gpu-x7k2p",
                "uid": UID,
                "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
            }
        }
    )
    devices = [
        published("gpu-0"),
        published("gpu-1"),
        AllocatedDevice("small/quarter", NODE, "gpu-2-1of4-0", PUBLISHED["gpu-2-1of4-0"].api["attributes"]),
    ]
    gpus, small = claim_metadata(identity, devices, DRIVER_NAME)
    base = "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpu"
    assert (gpus.request, gpus.container_path) == ("gpus", f"{base}/gpus/{DRIVER_NAME}-metadata.json")
    assert (small.request, small.container_path) == ("small", f"{base}/small/{DRIVER_NAME}-metadata.json")

    newest, older = objects(gpus.text)
    assert newest["apiVersion"] == "metadata.resource.k8s.io/v1beta1"
    assert older == {**newest, "apiVersion": "metadata.resource.k8s.io/v1alpha1"}
    assert newest["kind"] == "DeviceMetadata"
    assert newest["metadata"] == {"name": "trainer-gpu-x7k2p", "namespace": "team-a", "uid": UID, "generation": 1}
    assert newest["podClaimName"] == "gpu"
    [request] = newest["requests"]
    assert request["name"] == "gpus"
    assert [(d["driver"], d["pool"], d["name"]) for d in request["devices"]] == [
        (DRIVER_NAME, NODE, "gpu-0"),
        (DRIVER_NAME, NODE, "gpu-1"),
    ]
    for device in request["devices"]:
        assert device["attributes"] == PUBLISHED[device["name"]].api["attributes"], "every published attribute"
    assert objects(small.text)[0]["requests"][0]["name"] == "small/quarter", "the subrequest is named in the file"


def test_a_claim_named_in_the_pod_is_found_under_its_own_name() -> None:
    identity = ClaimIdentity.of({"metadata": {"namespace": "ns", "name": "shared-gpu", "uid": UID}})
    [gpus] = claim_metadata(identity, [published("gpu-0")], DRIVER_NAME)
    assert gpus.container_path == (
        f"/var/run/kubernetes.io/dra-device-attributes/resourceclaims/shared-gpu/gpus/{DRIVER_NAME}-metadata.json"
    )
    assert all("podClaimName" not in document for document in objects(gpus.text))


def test_the_same_claim_gives_the_same_text() -> None:
    identity = ClaimIdentity("ns", "train", UID, "gpu")
    first = claim_metadata(identity, [published("gpu-0")], DRIVER_NAME)
    assert claim_metadata(identity, [published("gpu-0")], DRIVER_NAME) == first


@pytest.mark.parametrize(
    ("identity", "request_name", "field"),
    [
        (ClaimIdentity("ns", "train", UID, "../../etc"), "gpus", "annotation resource.kubernetes.io/pod-claim-name"),
        (ClaimIdentity("ns", "train", UID, "Gpu"), "gpus", "annotation resource.kubernetes.io/pod-claim-name"),
        (ClaimIdentity("ns", "train", UID), "../gpus", "request name '..'"),
        (ClaimIdentity("ns", "a/b", UID), "gpus", "metadata.name 'a/b'"),
    ],
)
def test_a_name_that_is_no_dns_name_never_becomes_a_path(
    identity: ClaimIdentity, request_name: str, field: str
) -> None:
    with pytest.raises(PrepareError) as error:
        claim_metadata(identity, [AllocatedDevice(request_name, NODE, "gpu-0", {})], DRIVER_NAME)
    assert error.value.reason == "bad_claim"
    assert f"claim ns/{identity.name} ({UID})" in str(error.value) and field in str(error.value)
