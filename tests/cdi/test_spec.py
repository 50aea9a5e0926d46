"""CDI specs: minimum version from the fields used, name rules."""

from __future__ import annotations

import pytest

from cdi.spec import CdiDevice, ContainerEdits, DeviceNode, Mount, Spec, SpecError, minimum_version, to_document
from nativedra.base.kube.names import CDI_KIND

NODE = DeviceNode(path="/dev/nvidia0", type="c", major=195, minor=0)


def spec(*devices: CdiDevice, kind: str = CDI_KIND, **extra: object) -> Spec:
    return Spec(kind=kind, devices=devices, **extra)  # type: ignore[arg-type]


def device(name: str = "claim-gpu-0", edits: ContainerEdits | None = None, **extra: object) -> CdiDevice:
    return CdiDevice(name=name, container_edits=edits or ContainerEdits(device_nodes=(NODE,)), **extra)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("the_spec", "expected"),
    [
        (spec(device()), "0.3.0"),
        (spec(device(edits=ContainerEdits(mounts=(Mount("/a", "/b", type="bind"),)))), "0.4.0"),
        (spec(device(edits=ContainerEdits(device_nodes=(DeviceNode("/dev/x", host_path="/dev/y"),)))), "0.5.0"),
        (spec(device(name="0a1b-gpu-0")), "0.5.0"),
        (spec(device(annotations={"a": "b"})), "0.6.0"),
        (spec(device(), kind="vendor.io/dotted.class"), "0.6.0"),
        (spec(device(edits=ContainerEdits(additional_gids=(44,)))), "0.7.0"),
    ],
)
def test_minimum_version_follows_the_fields_used(the_spec: Spec, expected: str) -> None:
    assert minimum_version(the_spec) == expected
    assert to_document(the_spec)["cdiVersion"] == expected


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (spec(kind="novendor"), "vendor>/<class"),
        (spec(device(), kind="-bad/claim"), "invalid vendor"),
        (spec(), "at least one device"),
        (spec(device(name="bad name")), "invalid CDI device name"),
        (spec(device(), device()), "defined twice"),
        (spec(device(edits=ContainerEdits(device_nodes=(DeviceNode("dev/nvidia0"),)))), "not absolute"),
        (spec(device(edits=ContainerEdits())), "no container edits"),
    ],
)
def test_invalid_specs_are_rejected_with_the_part_named(bad: Spec, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        to_document(bad)
