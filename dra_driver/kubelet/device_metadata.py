"""Device metadata for containers (KEP-5304, Kubernetes 1.37): what a claim's devices look like,
as a file the container reads at a well-known path. Pure: claim identity and the allocated
devices with their published attributes in, one JSON document stream per request out.

Facts from k8s.io/dynamic-resource-allocation v0.37.2 (the kubeletplugin helper is the reference;
the kubelet itself takes no part: it only passes on the CDI device IDs of the answer):
- api/metadata/types.go: in-container directory, `resourceclaims/<claim name>` for claims named in
  the pod, `resourceclaimtemplates/<pod claim name>` for generated ones, file `<driver>-metadata.json`
  in a directory per request (the base request: a subrequest's parent);
- api/metadata/v1beta1/types.go (v1alpha1 is the same schema): the document's fields;
- kubeletplugin/metadata.go buildDeviceMetadata / encodeMetadataStream: one object per request,
  generation 1 when prepare writes it, the same object encoded once per API version, each
  followed by a newline;
- kubeletplugin/draplugin.go EnableDeviceMetadata: v1beta1, the latest version, must be written;
  older versions may follow it for consumers built before it.
Where the KEP text differs (its design section describes `/var/run/dra-device-attributes/
<driver>-<claimUID>-<request>.json` holding a `claims[]` document without apiVersion; the 1.36
alpha wrote v1alpha1 only), we follow the v0.37.2 code: v1beta1 first, then v1alpha1, so
consumers built against 1.36 still find the version they know.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver.errors import PrepareError

API_GROUP = "metadata.resource.k8s.io"
API_VERSIONS = (f"{API_GROUP}/v1beta1", f"{API_GROUP}/v1alpha1")  # newest first
KIND = "DeviceMetadata"
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
CLAIMS_SUBDIR = "resourceclaims"
TEMPLATES_SUBDIR = "resourceclaimtemplates"
FILE_SUFFIX = "-metadata.json"
# Set by the ResourceClaim controller on claims it generates from a template: the pod's
# spec.resourceClaims[].name (k8s.io/api resource/v1 PodResourceClaimAnnotation).
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL.pattern}(\.{_DNS_LABEL.pattern})*")
MAX_SUBDOMAIN = 253
# Go writes struct fields in declaration order (v1beta1 types.go, meta/v1 ObjectMeta, resource/v1
# DeviceAttribute) and map keys sorted; `render` does the same whatever order a document comes in
# (the checkpoint stores it with sorted keys).
_DOCUMENT_FIELDS = ("kind", "apiVersion", "metadata", "podClaimName", "requests")
_OBJECT_META_FIELDS = ("name", "namespace", "uid", "generation")
_DEVICE_FIELDS = ("driver", "pool", "name", "attributes", "networkData")
_ATTRIBUTE_FIELDS = ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")
_NETWORK_FIELDS = ("interfaceName", "ips", "hardwareAddress")
# Go's encoder writes these escaped; doing the same keeps our files byte-equal to the helper's.
_GO_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"})


@dataclass(frozen=True)
class ClaimIdentity:
    """What the document and the in-container path say about the claim."""

    namespace: str
    name: str
    uid: str
    pod_claim_name: str | None = None  # set for claims generated from a template

    @classmethod
    def of(cls, claim: Mapping[str, Any]) -> ClaimIdentity:
        metadata = claim["metadata"]
        annotations = metadata.get("annotations") or {}
        return cls(metadata["namespace"], metadata["name"], metadata["uid"], annotations.get(POD_CLAIM_NAME_ANNOTATION))


@dataclass(frozen=True)
class AllocatedDevice:
    """One allocation result of the claim with the attributes its ResourceSlice publishes."""

    request: str  # as in the allocation result: `<request>` or `<request>/<subrequest>`
    pool: str
    name: str
    attributes: Mapping[str, Mapping[str, Any]]  # ResourceSlice form: {"uuid": {"string": "GPU-…"}}


@dataclass(frozen=True)
class RequestMetadata:
    """The file of one request: where the container sees it and its document (newest version)."""

    request: str  # the base request name: it names the file and its directory
    container_path: str
    document: dict[str, Any]

    @property
    def text(self) -> str:
        return render(self.document)


def base_request(request: str) -> str:
    """A subrequest's file is its parent request's (the container names the request it asked for)."""
    return request.split("/", 1)[0]


def _checked(value: str, pattern: re.Pattern[str], what: str, identity: ClaimIdentity) -> str:
    if len(value) > MAX_SUBDOMAIN or not pattern.fullmatch(value):
        raise PrepareError(
            "bad_claim",
            f"claim {identity.namespace}/{identity.name} ({identity.uid}): {what} {value!r} cannot name a "
            "device metadata path (not a DNS name)",
        )
    return value


def container_path(driver: str, identity: ClaimIdentity, request: str) -> str:
    """Where the container finds the request's file; every segment is checked, since the pod
    claim name comes from an annotation a user may set on a claim of their own."""
    file = f"{driver}{FILE_SUFFIX}"
    request = _checked(request, _DNS_LABEL, "request name", identity)
    if identity.pod_claim_name:
        pod_claim = _checked(identity.pod_claim_name, _DNS_LABEL, f"annotation {POD_CLAIM_NAME_ANNOTATION}", identity)
        return f"{CONTAINER_DIR}/{TEMPLATES_SUBDIR}/{pod_claim}/{request}/{file}"
    name = _checked(identity.name, _DNS_SUBDOMAIN, "metadata.name", identity)
    return f"{CONTAINER_DIR}/{CLAIMS_SUBDIR}/{name}/{request}/{file}"


def _ordered(value: Mapping[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    return {key: value[key] for key in fields if key in value}


def _go_order(newest: Mapping[str, Any]) -> dict[str, Any]:
    """The document with every object's keys in the order the Go encoder writes them."""
    ordered = _ordered(newest, _DOCUMENT_FIELDS)
    ordered["metadata"] = _ordered(newest["metadata"], _OBJECT_META_FIELDS)
    requests = []
    for request in newest["requests"]:
        devices = []
        for device in request["devices"]:
            entry = _ordered(device, _DEVICE_FIELDS)
            if "attributes" in entry:
                attributes = entry["attributes"]
                entry["attributes"] = {key: _ordered(attributes[key], _ATTRIBUTE_FIELDS) for key in sorted(attributes)}
            if "networkData" in entry:
                entry["networkData"] = _ordered(entry["networkData"], _NETWORK_FIELDS)
            devices.append(entry)
        requests.append({"name": request["name"], "devices": devices})
    ordered["requests"] = requests
    return ordered


def document(
    identity: ClaimIdentity,
    request: str,
    devices: Sequence[AllocatedDevice],
    *,
    driver: str,
    api_version: str,
    generation: int,
) -> dict[str, Any]:
    """One DeviceMetadata object (the helper's buildDeviceMetadata)."""
    metadata = {"name": identity.name, "namespace": identity.namespace, "uid": identity.uid, "generation": generation}
    body: dict[str, Any] = {"kind": KIND, "apiVersion": api_version, "metadata": metadata}
    if identity.pod_claim_name is not None:
        body["podClaimName"] = identity.pod_claim_name
    entries = []
    for device in devices:
        entry: dict[str, Any] = {"driver": driver, "pool": device.pool, "name": device.name}
        if device.attributes:
            entry["attributes"] = {key: dict(value) for key, value in device.attributes.items()}
        entries.append(entry)
    body["requests"] = [{"name": request, "devices": entries}]
    return body


def render(newest: Mapping[str, Any]) -> str:
    """The file's text from its document: the same object once per API version, newest first,
    each pretty-printed (two-space indent) and followed by a newline, as the helper's encoder
    writes it. The checkpoint keeps the document only: a third of the text's size."""
    ordered = _go_order(newest)
    return "".join(
        json.dumps({**ordered, "apiVersion": version}, indent=2, ensure_ascii=False).translate(_GO_ESCAPES) + "\n"
        for version in API_VERSIONS
    )


def stream_text(
    identity: ClaimIdentity, request: str, devices: Sequence[AllocatedDevice], driver: str, generation: int = 1
) -> str:
    """The text of one request's file."""
    newest = document(identity, request, devices, driver=driver, api_version=API_VERSIONS[0], generation=generation)
    return render(newest)


def claim_metadata(
    identity: ClaimIdentity, devices: Sequence[AllocatedDevice], driver: str, generation: int = 1
) -> list[RequestMetadata]:
    """One file per request of the claim, in the order the requests first appear. Prepare writes
    generation 1, as the helper does; only a later change of the same request would raise it."""
    by_request: dict[str, list[AllocatedDevice]] = {}
    for device in devices:
        by_request.setdefault(device.request, []).append(device)
    files: dict[str, RequestMetadata] = {}
    for request, allocated in by_request.items():
        base = base_request(request)
        if base in files:  # two subrequests of one request: the allocator never picks more than one
            raise PrepareError(
                "bad_claim",
                f"claim {identity.namespace}/{identity.name} ({identity.uid}): request {base} is allocated "
                "through more than one subrequest",
            )
        newest = document(
            identity, request, allocated, driver=driver, api_version=API_VERSIONS[0], generation=generation
        )
        files[base] = RequestMetadata(base, container_path(driver, identity, base), newest)
    return list(files.values())
