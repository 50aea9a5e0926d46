"""Opaque configs: claim over class, other requests and drivers ignored, bad fields named."""

from __future__ import annotations

import pytest

from dra_driver.kubelet.opaque_config import API_VERSION, ConfigError, SharingStrategy, config_for_request
from nativedra.base.kube.names import DRIVER_NAME

MPS = {"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "MPS"}}
SLICED = {"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing"}}


def entry(source: str, parameters: object, requests: list[str] | None = None, driver: str = DRIVER_NAME) -> dict:  # type: ignore[type-arg]
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
        ({**MPS, "apiVersion": f"{DRIVER_NAME}/v9"}, "apiVersion"),
        ({**MPS, "colour": "red"}, "colour"),
    ],
)
def test_invalid_config_names_claim_position_and_field(parameters: object, field: str) -> None:
    with pytest.raises(ConfigError) as error:
        config_for_request([entry("FromClass", SLICED), entry("FromClaim", parameters)], "gpus", "ns/my-claim")
    message = str(error.value)
    assert "ns/my-claim" in message and "config[1]" in message and f"'{field}" in message
