"""The wire format of the in-tree protos matches the kubelet's, and the generated code is current."""

from __future__ import annotations

from typing import Any

from dra_driver.proto import generate
from dra_driver.proto.gen.dra.v1 import api_pb2 as dra_v1
from dra_driver.proto.gen.dra.v1beta1 import api_pb2 as dra_v1beta1
from dra_driver.proto.gen.dra_health.v1alpha1 import api_pb2 as health
from dra_driver.proto.gen.pluginregistration.v1 import api_pb2 as registration


def _numbers(message: Any) -> dict[str, int]:
    return {field.name: field.number for field in message.DESCRIPTOR.fields}


def test_wire_format_matches_the_kubelet_api() -> None:
    assert dra_v1.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1"
    assert dra_v1beta1.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1beta1"
    assert _numbers(dra_v1.Device) == {
        "request_names": 1,
        "pool_name": 2,
        "device_name": 3,
        "cdi_device_ids": 4,
        "share_id": 5,
    }
    assert "share_id" not in _numbers(dra_v1beta1.Device)
    assert _numbers(dra_v1.Claim) == {"namespace": 1, "uid": 2, "name": 3}
    assert _numbers(dra_v1.NodePrepareResourceResponse) == {"devices": 1, "error": 2}
    assert _numbers(registration.PluginInfo) == {"type": 1, "name": 2, "endpoint": 3, "supported_versions": 4}
    assert registration.DESCRIPTOR.package == "pluginregistration"
    assert _numbers(health.DeviceHealth) == {
        "device": 1,
        "health": 2,
        "last_updated_time": 3,
        "health_check_timeout_seconds": 4,
        "message": 5,
    }
    assert dra_v1.DESCRIPTOR.services_by_name["DRAPlugin"].full_name == "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    assert health.DESCRIPTOR.services_by_name["DRAResourceHealth"].full_name == "v1alpha1.DRAResourceHealth"


def test_generated_code_is_current() -> None:
    assert generate.main(["--check"]) == 0
