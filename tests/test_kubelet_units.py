"""Opaque configs, socket names and the wire format of the in-tree protos."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dra_driver.kubelet_paths import MAX_UNIX_PATH, dra_socket, registration_socket
from dra_driver.opaque_config import ConfigError, SharingStrategy, config_for_request
from dra_driver.proto import generate
from dra_driver.proto.gen.dra.v1 import api_pb2 as dra_v1
from dra_driver.proto.gen.dra.v1beta1 import api_pb2 as dra_v1beta1
from dra_driver.proto.gen.dra_health.v1alpha1 import api_pb2 as health
from dra_driver.proto.gen.pluginregistration.v1 import api_pb2 as registration

MPS = {"apiVersion": "gpu.nativedra.dev/v1alpha1", "kind": "GpuConfig", "sharing": {"strategy": "MPS"}}
SLICED = {"apiVersion": "gpu.nativedra.dev/v1alpha1", "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing"}}


def entry(
    source: str, parameters: object, requests: list[str] | None = None, driver: str = "gpu.nativedra.dev"
) -> dict:  # type: ignore[type-arg]
    return {"source": source, "requests": requests or [], "opaque": {"driver": driver, "parameters": parameters}}


def test_claim_config_overrides_class_config_whatever_the_order() -> None:
    config = config_for_request([entry("FromClaim", MPS), entry("FromClass", SLICED)], "gpus", "ns/c")
    assert config.sharing.strategy is SharingStrategy.MPS


def test_configs_for_other_requests_or_drivers_are_ignored() -> None:
    bad = {"nonsense": True}
    config = config_for_request(
        [entry("FromClaim", bad, ["other"]), entry("FromClaim", bad, driver="gpu.nvidia.com")], "gpus/sub", "ns/c"
    )
    assert config.sharing.strategy is SharingStrategy.EXCLUSIVE


@pytest.mark.parametrize(
    ("parameters", "field"),
    [
        ({**MPS, "sharing": {"strategy": "Turbo"}}, "sharing.strategy"),
        (
            {**MPS, "sharing": {"strategy": "MPS", "mps": {"activeThreadPercentage": 0}}},
            "sharing.mps.activeThreadPercentage",
        ),
        ({**MPS, "sharing": {"strategy": "Exclusive", "mps": {}}}, "sharing"),
        ({**MPS, "apiVersion": "gpu.nativedra.dev/v9"}, "apiVersion"),
        ({**MPS, "colour": "red"}, "colour"),
    ],
)
def test_invalid_config_names_claim_position_and_field(parameters: object, field: str) -> None:
    with pytest.raises(ConfigError) as error:
        config_for_request([entry("FromClass", SLICED), entry("FromClaim", parameters)], "gpus", "ns/my-claim")
    message = str(error.value)
    assert "ns/my-claim" in message and "config[1]" in message and f"'{field}" in message


def test_socket_names_follow_kubelet_conventions() -> None:
    assert registration_socket(Path("/r")).name == "gpu.nativedra.dev-reg.sock"
    uid = "8f3e0c9a-1b2c-4d5e-8f90-a1b2c3d4e5f6"
    assert registration_socket(Path("/r"), uid).name == f"gpu.nativedra.dev-{uid}-reg.sock"
    long_dir = Path("/" + "d" * 50)
    fallback = registration_socket(long_dir, uid)
    assert len(str(fallback)) <= MAX_UNIX_PATH and uid not in fallback.name and "/" not in fallback.name
    assert dra_socket(Path("/p"), uid).name == f"dra-{uid}.sock"
    with pytest.raises(ValueError, match="not a Kubernetes UID"):
        registration_socket(Path("/r"), "../../x")


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
