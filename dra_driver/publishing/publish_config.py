"""Which forms of each GPU a node publishes: whole, fixed fractions, MIG placements, shares."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

ALLOWED_FRACTIONS = (2, 3, 4, 8, 16)


class ConfigError(ValueError):
    """The publish configuration is invalid; the message names the file and field."""


class PublishConfig(BaseModel):
    """Admin choice per node. Defaults: whole GPUs + 1/2, 1/4, 1/8 fractions + MIG placements."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    fractions: tuple[int, ...] = (2, 4, 8)
    mig: bool = True
    share_gpus: Literal["all"] | tuple[Annotated[int, Field(ge=0)], ...] = ()
    share_default_compute: Annotated[int, Field(ge=1, le=100)] = 10
    share_min_memory_mib: Annotated[int, Field(ge=1)] = 256
    # A MIG-capable GPU not in MIG mode offers both its MIG placements and its fractions, kept apart by
    # compatibility groups so the scheduler picks one mode per GPU (needs the alpha gate
    # DRADeviceCompatibilityGroups on API server and scheduler; without it: the fixed split).
    mig_or_fractions: bool = False
    # Where the API server keeps no device taints (1.34/1.35 defaults), a faulty GPU is not published
    # at all rather than published allocatable (set by the plugin when it sees taints dropped).
    omit_unhealthy: bool = False
    # The taint effect for a fatal fault: NoSchedule keeps new claims off the GPU and leaves its pods
    # running; NoExecute makes the kube-controller-manager evict the pods using it (Kubernetes 1.37+
    # by default), so a gang's framework restarts it in seconds instead of hanging on a broken GPU.
    # Non-fatal faults (application XIDs) are always NoSchedule.
    fatal_fault_effect: Literal["NoSchedule", "NoExecute"] = "NoSchedule"

    @field_validator("fractions")
    @classmethod
    def _known_fractions(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        for denominator in value:
            if denominator not in ALLOWED_FRACTIONS:
                raise ValueError(f"fraction 1/{denominator} is not one of {ALLOWED_FRACTIONS}")
        return tuple(sorted(set(value)))

    def shares(self, index: int) -> bool:
        return self.share_gpus == "all" or index in self.share_gpus


def load_publish_config(path: Path) -> PublishConfig:
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: {error}") from error
    try:
        return PublishConfig.model_validate(raw)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in issue['loc'])}: {issue['msg']}" for issue in error.errors())
        raise ConfigError(f"{path}: {problems}") from error


def parse_fractions(text: str) -> tuple[int, ...]:
    """`2,4,8` -> (2, 4, 8); `none` -> () (flag syntax)."""
    if text.strip().lower() in {"", "none"}:
        return ()
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError as error:
        raise ConfigError(f"--fractions {text!r}: expected denominators like 2,4,8 or 'none'") from error
