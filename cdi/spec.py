"""The CDI spec model (CDI 1.1.0 format) and the minimum cdiVersion its fields need."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

EARLIEST_VERSION = "0.3.0"
_VENDOR_OR_CLASS = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*[A-Za-z0-9]|[A-Za-z]")
_DEVICE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?")
MAX_KIND_NAME = 63


class SpecError(ValueError):
    """The spec breaks a CDI rule; the message names the part."""


@dataclass(frozen=True)
class DeviceNode:
    path: str
    host_path: str | None = None
    type: str | None = None  # "c" or "b"
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None
    permissions: str | None = None  # "rwm" by default in runtimes
    uid: int | None = None
    gid: int | None = None


@dataclass(frozen=True)
class Mount:
    host_path: str
    container_path: str
    type: str | None = None
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class Hook:
    hook_name: str
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None


@dataclass(frozen=True)
class ContainerEdits:
    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()
    additional_gids: tuple[int, ...] = ()

    def is_empty(self) -> bool:
        return not (self.env or self.device_nodes or self.mounts or self.hooks or self.additional_gids)


@dataclass(frozen=True)
class CdiDevice:
    name: str
    container_edits: ContainerEdits
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Spec:
    kind: str  # "<vendor>/<class>"
    devices: tuple[CdiDevice, ...]
    container_edits: ContainerEdits = ContainerEdits()
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def vendor(self) -> str:
        return self.kind.split("/", 1)[0]

    @property
    def device_class(self) -> str:
        return self.kind.split("/", 1)[1]

    def qualified_name(self, device: str) -> str:
        return f"{self.kind}={device}"


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _edits_need(edits: ContainerEdits) -> str:
    needed = EARLIEST_VERSION
    if edits.additional_gids:
        needed = max(needed, "0.7.0", key=_version_tuple)
    if any(m.type for m in edits.mounts):
        needed = max(needed, "0.4.0", key=_version_tuple)
    if any(n.host_path for n in edits.device_nodes):
        needed = max(needed, "0.5.0", key=_version_tuple)
    return needed


def minimum_version(spec: Spec) -> str:
    """The oldest cdiVersion that can express `spec` (old runtimes vendor old CDI libraries)."""
    needed = [EARLIEST_VERSION, _edits_need(spec.container_edits)]
    needed += [_edits_need(device.container_edits) for device in spec.devices]
    if any(device.name[:1].isdigit() for device in spec.devices):
        needed.append("0.5.0")
    if spec.annotations or any(device.annotations for device in spec.devices):
        needed.append("0.6.0")
    if "." in spec.device_class:
        needed.append("0.6.0")
    return max(needed, key=_version_tuple)


def validate(spec: Spec) -> None:
    if "/" not in spec.kind:
        raise SpecError(f"kind {spec.kind!r}: must be <vendor>/<class>")
    if len(spec.kind) > MAX_KIND_NAME:
        raise SpecError(f"kind {spec.kind!r}: longer than {MAX_KIND_NAME} characters")
    for part, value in (("vendor", spec.vendor), ("class", spec.device_class)):
        if not _VENDOR_OR_CLASS.fullmatch(value):
            raise SpecError(f"kind {spec.kind!r}: invalid {part} {value!r}")
    if not spec.devices:
        raise SpecError(f"kind {spec.kind!r}: a spec needs at least one device")
    seen: set[str] = set()
    for device in spec.devices:
        if not _DEVICE_NAME.fullmatch(device.name):
            raise SpecError(f"device {device.name!r}: invalid CDI device name")
        if device.name in seen:
            raise SpecError(f"device {device.name!r}: defined twice")
        seen.add(device.name)
        if device.container_edits.is_empty() and spec.container_edits.is_empty():
            raise SpecError(f"device {device.name!r}: no container edits")
        for node in device.container_edits.device_nodes:
            if not node.path.startswith("/"):
                raise SpecError(f"device {device.name!r}: device node path {node.path!r} is not absolute")
            if node.type not in (None, "c", "b", "p", "u"):
                raise SpecError(f"device {device.name!r}: device node {node.path} has type {node.type!r}")


def _present(mapping: dict[str, Any]) -> dict[str, Any]:
    """The fields that are set: CDI omits unset optional fields."""
    return {key: value for key, value in mapping.items() if value is not None}


def _node_dict(node: DeviceNode) -> dict[str, Any]:
    return _present(
        {
            "path": node.path,
            "hostPath": node.host_path,
            "type": node.type,
            "major": node.major,
            "minor": node.minor,
            "fileMode": node.file_mode,
            "permissions": node.permissions,
            "uid": node.uid,
            "gid": node.gid,
        }
    )


def _edits_dict(edits: ContainerEdits) -> dict[str, Any]:
    result: dict[str, Any] = {}
    if edits.env:
        result["env"] = list(edits.env)
    if edits.device_nodes:
        result["deviceNodes"] = [_node_dict(n) for n in edits.device_nodes]
    if edits.mounts:
        result["mounts"] = [
            _present(
                {
                    "hostPath": m.host_path,
                    "containerPath": m.container_path,
                    "type": m.type,
                    "options": list(m.options) or None,
                }
            )
            for m in edits.mounts
        ]
    if edits.hooks:
        result["hooks"] = [
            _present(
                {
                    "hookName": h.hook_name,
                    "path": h.path,
                    "args": list(h.args) or None,
                    "env": list(h.env) or None,
                    "timeout": h.timeout,
                }
            )
            for h in edits.hooks
        ]
    if edits.additional_gids:
        result["additionalGids"] = list(edits.additional_gids)
    return result


def to_document(spec: Spec) -> dict[str, Any]:
    validate(spec)
    document: dict[str, Any] = {"cdiVersion": minimum_version(spec), "kind": spec.kind}
    if spec.annotations:
        document["annotations"] = dict(spec.annotations)
    document["devices"] = []
    for device in spec.devices:
        entry: dict[str, Any] = {"name": device.name}
        if device.annotations:
            entry["annotations"] = dict(device.annotations)
        entry["containerEdits"] = _edits_dict(device.container_edits)
        document["devices"].append(entry)
    if not spec.container_edits.is_empty():
        document["containerEdits"] = _edits_dict(spec.container_edits)
    return document
