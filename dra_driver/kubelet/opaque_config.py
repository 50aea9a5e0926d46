"""Opaque device configuration `gpu.nativedra.dev/v1alpha1` kind `GpuConfig`, from a DeviceClass
or a claim. Validated strictly: a bad config fails only its claim, with the field named."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from nativedra.base.kube.names import DRIVER_NAME

API_VERSION = f"{DRIVER_NAME}/v1alpha1"


class ConfigError(ValueError):
    """An opaque config is invalid; the message names where it came from and the field."""


class SharingStrategy(StrEnum):
    EXCLUSIVE = "Exclusive"
    TIME_SLICING = "TimeSlicing"
    MPS = "MPS"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TimeSlicing(_Strict):
    interval: Literal["Default", "Short", "Medium", "Long"] = "Default"


class Mps(_Strict):
    active_thread_percentage: Annotated[int | None, Field(ge=1, le=100, alias="activeThreadPercentage")] = None
    pinned_memory_limit_mib: Annotated[int | None, Field(ge=1, alias="pinnedMemoryLimitMiB")] = None


class Sharing(_Strict):
    strategy: SharingStrategy = SharingStrategy.EXCLUSIVE
    time_slicing: Annotated[TimeSlicing | None, Field(alias="timeSlicing")] = None
    mps: Mps | None = None

    @model_validator(mode="after")
    def _settings_match_strategy(self) -> Sharing:
        if self.mps is not None and self.strategy is not SharingStrategy.MPS:
            raise ValueError("mps settings need strategy: MPS")
        if self.time_slicing is not None and self.strategy is not SharingStrategy.TIME_SLICING:
            raise ValueError("timeSlicing settings need strategy: TimeSlicing")
        return self


class GpuConfig(_Strict):
    api_version: Annotated[Literal["gpu.nativedra.dev/v1alpha1"], Field(alias="apiVersion")]
    kind: Literal["GpuConfig"]
    sharing: Sharing = Sharing()


DEFAULT = GpuConfig.model_validate({"apiVersion": API_VERSION, "kind": "GpuConfig"})


def parse(parameters: Any, where: str) -> GpuConfig:
    try:
        return GpuConfig.model_validate(parameters)
    except ValidationError as error:
        issue = error.errors()[0]
        location = ".".join(str(part) for part in issue["loc"]) or "(document)"
        raise ConfigError(f"{where}: field {location!r}: {issue['msg']}") from error


def config_for_request(allocation_config: list[dict[str, Any]], request: str, claim: str) -> GpuConfig:
    """The effective config of one request: class configs first, then claim configs; last wins."""
    ordered = sorted(enumerate(allocation_config), key=lambda item: item[1].get("source") != "FromClass")
    effective = DEFAULT
    for position, entry in ordered:
        opaque = entry.get("opaque") or {}
        if opaque.get("driver") != DRIVER_NAME:
            continue
        requests = entry.get("requests") or []
        if requests and request not in requests and request.split("/", 1)[0] not in requests:
            continue
        source = "DeviceClass" if entry.get("source") == "FromClass" else "claim"
        effective = parse(
            opaque.get("parameters"),
            f"claim {claim}: status.allocation.devices.config[{position}] ({source} config) for request {request!r}",
        )
    return effective
