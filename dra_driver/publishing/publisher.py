"""Make this node's ResourceSlices in the API equal to the desired specs, with no write when
they already are. Anyone else's edit or deletion of our slices is undone on the next reconcile."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client, watch

from dra_driver import metrics
from dra_driver.publishing.api_features import FieldsDroppedError, dropped_fields, feature_fields
from dra_driver.publishing.handover import PUBLISHER_ANNOTATION, Instance, newer_instance
from nativedra.base.kube.names import DRIVER_NAME
from nativedra.base.kube.resources import RESOURCE_SLICES
from nativedra.base.kube.units import quantity

MANAGED_BY = {"app.kubernetes.io/managed-by": "nativedra"}
QUANTITY_KEYS = frozenset({"value", "default", "min", "max", "step", "validValues"})
QUANTITY_SECTIONS = frozenset({"capacity", "counters"})  # only there are "value"s quantities
_DRIVER_SLUG = DRIVER_NAME.replace(".", "-")
MAX_NAME = 253


@dataclass(frozen=True)
class PublishResult:
    created: int = 0
    updated: int = 0
    deleted: int = 0
    generation: int = 0
    yielded_to: Instance | None = None  # a newer instance publishes: nothing was written

    @property
    def writes(self) -> int:
        return self.created + self.updated + self.deleted


def slice_name(node_name: str, position: int) -> str:
    """Deterministic, so a restarted plugin finds and reuses its slices."""
    suffix = f"-{_DRIVER_SLUG}-{position:03d}"
    if len(node_name) + len(suffix) <= MAX_NAME:
        return node_name + suffix
    digest = hashlib.sha256(node_name.encode()).hexdigest()[:10]
    return f"{node_name[: MAX_NAME - len(suffix) - 11]}-{digest}{suffix}"


def _normalize(value: Any, key: str | None = None, quantities: bool = False) -> Any:
    """Remove what the API server adds or rewrites: taint timestamps, quantity spellings."""
    if isinstance(value, dict):
        return {
            k: _normalize(v, k, quantities or k in QUANTITY_SECTIONS)
            for k, v in value.items()
            if k != "timeAdded" and v is not None
        }
    if isinstance(value, list):
        return [_normalize(item, key, quantities) for item in value]
    if quantities and key in QUANTITY_KEYS and isinstance(value, str | int):
        return quantity(value)
    return value


def same_spec(desired: dict[str, Any], actual: dict[str, Any]) -> bool:
    return bool(_normalize(desired) == _normalize(actual))


class SlicePublisher:
    """`instance` (when the plugin knows its pod) is written on every slice, and the publisher
    leaves the slices alone while a newer instance that is `alive` has written them (handover)."""

    def __init__(
        self,
        api: client.ApiClient,
        node_name: str,
        instance: Instance | None = None,
        alive: Callable[[str], bool] = lambda _: False,
    ) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.node_name = node_name
        self.instance = instance
        self.alive = alive
        self._node_uid: str | None = None
        self._served: frozenset[str] = frozenset()  # feature fields a dry run showed the server keeps

    @property
    def field_selector(self) -> str:
        """Selects exactly this node's slices of our driver (lists and watches)."""
        return f"spec.nodeName={self.node_name},spec.driver={DRIVER_NAME}"

    def list_ours(self) -> list[dict[str, Any]]:
        return list(RESOURCE_SLICES.list(self.api, field_selector=self.field_selector)["items"])

    def watch_ours(self, watcher: watch.Watch, timeout_s: int) -> Iterator[dict[str, Any]]:
        """Events on the slices `list_ours` returns, until the server ends the watch."""
        stream: Iterator[dict[str, Any]] = watcher.stream(
            RESOURCE_SLICES.lister(self.api), field_selector=self.field_selector, timeout_seconds=timeout_s
        )
        return stream

    def _owner(self) -> list[dict[str, Any]]:
        if self._node_uid is None:
            self._node_uid = str(self.core.read_node(self.node_name).metadata.uid)
        return [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": self.node_name,
                "uid": self._node_uid,
                "controller": True,
            }
        ]

    def reconcile(self, specs: list[dict[str, Any]]) -> PublishResult:
        try:
            return self._reconcile(specs)
        except Exception:
            metrics.RECONCILE_ERRORS.inc()
            raise

    def _reconcile(self, specs: list[dict[str, Any]]) -> PublishResult:
        actual = {obj["metadata"]["name"]: obj for obj in self.list_ours()}
        generation = max((obj["spec"]["pool"].get("generation", 0) for obj in actual.values()), default=0)
        if self.instance is not None:
            newer = newer_instance(self.instance, actual.values(), self.alive)
            if newer is not None:
                return PublishResult(generation=generation, yielded_to=newer)
        desired = {slice_name(self.node_name, i): spec for i, spec in enumerate(specs)}
        unchanged = set(actual) == set(desired) and all(
            same_spec(_with_generation(spec, generation), actual[name]["spec"]) for name, spec in desired.items()
        )
        self._observe(specs)
        if unchanged:
            return PublishResult(generation=generation)
        generation += 1
        created = updated = deleted = 0
        for name, spec in desired.items():
            body: dict[str, Any] = {
                "apiVersion": RESOURCE_SLICES.api_version,
                "kind": RESOURCE_SLICES.kind,
                "metadata": {"name": name, "labels": dict(MANAGED_BY), "ownerReferences": self._owner()},
                "spec": _with_generation(spec, generation),
            }
            if self.instance is not None:
                body["metadata"]["annotations"] = {PUBLISHER_ANNOTATION: self.instance.stamp()}
            if name in actual:
                body["metadata"]["resourceVersion"] = actual[name]["metadata"]["resourceVersion"]
            self._check_served(name, body, name in actual)
            if name in actual:
                stored = RESOURCE_SLICES.replace(self.api, name, body)
                metrics.SLICE_WRITES.labels("update").inc()
                updated += 1
            else:
                stored = RESOURCE_SLICES.create(self.api, body)
                metrics.SLICE_WRITES.labels("create").inc()
                created += 1
            dropped = dropped_fields(body["spec"], stored.get("spec") or {})
            if dropped:  # counter slices come first: no partition is published without its counters
                raise FieldsDroppedError(dropped)
        for name in set(actual) - set(desired):
            try:
                RESOURCE_SLICES.delete(self.api, name)
            except client.ApiException as error:
                if error.status != 404:
                    raise
            metrics.SLICE_WRITES.labels("delete").inc()
            deleted += 1
        return PublishResult(created, updated, deleted, generation)

    def _check_served(self, name: str, body: dict[str, Any], exists: bool) -> None:
        """Before a slice with a feature field not yet seen kept is shown to the scheduler, a dry
        run of the write: what the API server would store. Read back only after the write, a dropped
        field would leave the slice visible for a moment, and on 1.34/1.35 servers a waiting share
        claim can be allocated from it, then its GPU again to a whole-GPU claim."""
        features = feature_fields(body["spec"])
        if features <= self._served:
            return
        if exists:
            trial = RESOURCE_SLICES.replace(self.api, name, body, dry_run=True)
        else:
            trial = RESOURCE_SLICES.create(self.api, body, dry_run=True)
        dropped = dropped_fields(body["spec"], trial.get("spec") or {})
        if dropped:
            raise FieldsDroppedError(dropped)
        self._served |= features

    @staticmethod
    def _observe(specs: list[dict[str, Any]]) -> None:
        metrics.SLICES_PUBLISHED.set(len(specs))
        metrics.DEVICES_PUBLISHED.set(sum(len(spec.get("devices", [])) for spec in specs))


def _with_generation(spec: dict[str, Any], generation: int) -> dict[str, Any]:
    result = copy.deepcopy(spec)
    result["pool"]["generation"] = generation
    return result
