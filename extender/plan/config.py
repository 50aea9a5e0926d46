"""Extender configuration (file or ConfigMap), validated with field-named errors."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from extender.pods.model import HOLD_TIMEOUT_SECONDS, PLAN_BUDGET_SECONDS
from extender.recover.grant import SparesGrant
from nativedra.base.kube.names import DRIVER_NAME

ZONE_LABEL = "topology.kubernetes.io/zone"
BLOCK_LABEL = "nativedra.dev/block"
RACK_LABEL = "nativedra.dev/rack"
NVLINK_CLIQUE_LABEL = "nvidia.com/gpu.clique"
HOSTNAME_LABEL = "kubernetes.io/hostname"
DEFAULT_TOPOLOGY_LEVELS = (ZONE_LABEL, BLOCK_LABEL, RACK_LABEL, NVLINK_CLIQUE_LABEL, HOSTNAME_LABEL)
# A Kubernetes label key: an optional DNS subdomain prefix and "/", then a name of up to 63 characters.
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class ConfigError(ValueError):
    pass


class ScoreWeights(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)
    numa: Annotated[int, Field(ge=0, le=100)] = 2
    packing: Annotated[int, Field(ge=0, le=100)] = 1
    fraction_packing: Annotated[int, Field(ge=0, le=100)] = 1


def _label_key_problem(key: str) -> str | None:
    """Why `key` is not a label key a node could carry, if it is not."""
    if not key:
        return "a level is empty"
    prefix, _, name = key.rpartition("/")
    if "/" in key and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return f"{key!r} is not a node label key (bad prefix)"
    return None if _LABEL_NAME.fullmatch(name) else f"{key!r} is not a node label key"


class ExtenderConfig(BaseModel):
    """Topology levels are node label keys, widest first: a gang preferring one level widens
    through the levels listed before it, so a typo or a repeat would silently change placement."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)
    topology_levels: tuple[str, ...] = DEFAULT_TOPOLOGY_LEVELS
    plan_timeout_seconds: Annotated[float, Field(gt=0)] = HOLD_TIMEOUT_SECONDS
    # Each gang's planning stops after this long and answers "not placeable yet".
    plan_budget_seconds: Annotated[float, Field(gt=0)] = PLAN_BUDGET_SECONDS
    # A ceiling on gang size below what the cluster could ever hold (that one always applies).
    max_gang_size: Annotated[int, Field(ge=1)] | None = None
    # Of the cluster's nodes, the share on which one namespace's waiting gangs may hold capacity
    # (rounded down, at least one node): a gang that would take its namespace past it waits
    # holding nothing, as an expired gang does. 1: no bound beyond the cluster.
    max_namespace_hold_share: Annotated[float, Field(gt=0, le=1)] = 1.0
    driver: str = DRIVER_NAME
    weights: ScoreWeights = ScoreWeights()
    # A pod outside every gang may be answered from a plan up to this old when only usage moved
    # since (GPUs freed or taken: no gang member, claim or class changed); a background planner
    # catches up. 0: every answer waits for a plan of the newest view.
    stale_plan_seconds: Annotated[float, Field(ge=0, le=10)] = 0.5
    # The background planner starts a plan at most this often, so it never takes the GIL from the
    # request threads for long.
    refresh_interval_seconds: Annotated[float, Field(gt=0, le=10)] = 0.1
    # The scheduler profile's percentageOfNodesToScore (0: its adaptive default): tells when the
    # nodes a filter call offers are every node the scheduler found room on, not a sample.
    percentage_of_nodes_to_score: Annotated[int, Field(ge=0, le=100)] = 0
    # Preemption for devices (Kubernetes never preempts for DRA claims): off, nothing is evicted.
    preemption: bool = True
    # How long devices freed by preemption are kept for the preemptor before they are let go.
    preemption_hold_seconds: Annotated[int, Field(ge=10)] = 300
    # A gang that loses members while it runs whole (a GPU fault evicted one, its JobSet restarts,
    # its LWS group is recreated) gets its healthy nodes kept for it this long, against pods and
    # gangs of equal or lower priority, and goes back to them and their domain. 0: off.
    return_hold_seconds: Annotated[int, Field(ge=0, le=3600)] = 60
    # Who may have spare nodes kept for a running gang (nativedra.dev/spares), and how many: none
    # unless granted here.
    spares: SparesGrant = SparesGrant()

    @field_validator("topology_levels")
    @classmethod
    def _label_keys(cls, levels: tuple[str, ...]) -> tuple[str, ...]:
        problems = [problem for problem in map(_label_key_problem, levels) if problem]
        repeated = sorted({level for level in levels if levels.count(level) > 1})
        if repeated:
            problems.append(f"listed more than once: {', '.join(repeated)}")
        if problems:
            raise ValueError("; ".join(problems))
        return levels


def load_config(path: Path | None) -> ExtenderConfig:
    if path is None:
        return ExtenderConfig()
    try:
        return ExtenderConfig.model_validate(yaml.safe_load(path.read_text()) or {})
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: {error}") from error
    except ValidationError as error:
        issue = error.errors()[0]
        raise ConfigError(f"{path}: field {'.'.join(map(str, issue['loc']))!r}: {issue['msg']}") from error
