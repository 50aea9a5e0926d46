"""Feeds `ClusterState` from the API: one list, then one long watch per kind.

A watch the server ends (its timeout) is resumed from the last resourceVersion seen, and bookmarks
keep that version current while nothing changes, so the extender lists a kind again only when the
server says the version is gone (410) or the connection failed. A re-list replaces the whole kind,
which makes the next plan start from scratch: at 5,000 nodes that is seconds, so it must not
happen every few minutes.

Events are read as raw JSON: the typed client models cost ~45x the JSON decoding per pod event,
on the thread that holds the GIL while requests wait.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

import msgspec
from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

from extender.cluster.reservation import LABEL as PREEMPTION_LABEL
from extender.cluster.state import NATIVE_KINDS, SLICES, ClusterState
from extender.devices.slices import SliceError, published_slice, slice_key, slice_list
from nativedra.base.gcutil.collector import built_in_bulk
from nativedra.base.kube.resources import (
    COSCHEDULING_POD_GROUPS,
    DEVICE_CLASSES,
    JOBSETS,
    KUEUE_WORKLOADS,
    NATIVE_POD_GROUPS,
    NATIVE_POD_GROUPS_V1ALPHA2,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    Resource,
)

log = logging.getLogger(__name__)
# Custom resources are listed through `CustomObjectsApi`; built-in kinds through their typed APIs.
# Kinds are named by plural, except the native PodGroups (same plural as scheduler-plugins' ones).
CUSTOM_RESOURCES: dict[str, Resource] = {
    **{
        r.plural: r
        for r in (
            RESOURCE_SLICES,
            RESOURCE_CLAIMS,
            RESOURCE_CLAIM_TEMPLATES,
            DEVICE_CLASSES,
            COSCHEDULING_POD_GROUPS,
            JOBSETS,
            KUEUE_WORKLOADS,
        )
    },
    NATIVE_KINDS[0]: NATIVE_POD_GROUPS,
    NATIVE_KINDS[1]: NATIVE_POD_GROUPS_V1ALPHA2,
}
# What an optional kind's absence means, said once in the log when the API stops serving it.
ABSENT_MEANS = {
    "podgroups": "pods labelled scheduling.x-k8s.io/pod-group are gangs of unknown size until it is",
    "jobsets": "JobSet pods wait to be planned until it is",
    "nativepodgroups": (
        "pods' spec.schedulingGroup is not read as a gang (Kubernetes native gang scheduling needs the "
        "GenericWorkload feature gate and scheduling.k8s.io/v1beta1 in --runtime-config)"
    ),
    "nativepodgroups-v1alpha2": "Kubernetes 1.36's native PodGroups are not read (1.37 serves v1beta1 instead)",
    "poddisruptionbudgets": "preemption counts no PodDisruptionBudget (the Eviction API still enforces them)",
    "preemptions": "no devices are kept for preemptors (Leases in the extender's namespace)",
    "workloads": "no pod is proven Kueue's: every pod may be a victim of preemption, Kueue labels or not",
}
OPTIONAL_KIND_RETRY_S = 5.0  # a JobSet created right after its CRD waits at most this long
WATCH_SECONDS = 300  # the server ends each watch after this; it is resumed, not re-listed
# A watch that has sent nothing, not even a bookmark (about one a minute), for this long past its
# timeout is a dead connection.
WATCH_READ_SLACK_S = 60
GONE = 410
LIST_PAGE = 500  # objects per LIST answer, as client-go's reflector asks
DEFAULT_NAMESPACE = "nativedra-system"

Lister = Callable[..., Any]


class VersionGoneError(Exception):
    """The server no longer has the resourceVersion the watch asked for: list again."""


def lister_of(api: client.ApiClient, kind: str, namespace: str) -> Lister:
    """How to list and watch `kind` (the preemption Leases: those of `namespace`)."""
    core = client.CoreV1Api(api)
    lister: Lister
    if kind == "nodes":
        lister = core.list_node
    elif kind == "pods":
        lister = core.list_pod_for_all_namespaces
    elif kind == "poddisruptionbudgets":
        lister = client.PolicyV1Api(api).list_pod_disruption_budget_for_all_namespaces
    elif kind == "preemptions":
        lister = functools.partial(
            client.CoordinationV1Api(api).list_namespaced_lease, namespace, label_selector=PREEMPTION_LABEL
        )
    else:
        lister = CUSTOM_RESOURCES[kind].lister(api)
    return lister


def _say_absent(kind: str, status: int) -> None:
    """Once per absence: which API is missing and what the extender does without it."""
    resource = CUSTOM_RESOURCES.get(kind)
    what = f"{resource.kind} {resource.api_version}/{resource.plural}" if resource else kind
    why = "not served" if status == 404 else "not readable with the extender's RBAC (403)"
    log.info("%s is %s: %s", what, why, ABSENT_MEANS[kind])


def list_kind(lister: Lister, state: ClusterState, kind: str) -> str:
    """Replace the state's `kind` with a fresh list, read LIST_PAGE objects a page, as client-go's
    reflector does: a page's bytes are dropped once read (at 10,000 nodes publishing the shipped
    defaults, one answer of every slice is 950 MB). The resourceVersion to watch from."""
    items: list[Any] = []
    token, version = "", ""
    while True:
        paging = {"_continue": token} if token else {}
        body = lister(_preload_content=False, limit=LIST_PAGE, **paging).data  # read outside the pause
        # The listed objects live as long as the state: frozen, no collection walks them again (a full
        # collection over them stalls a call for up to a second).
        with built_in_bulk():
            if kind == SLICES:
                page, version, token = slice_list(body)
                items.extend(page)
            else:
                listing = msgspec.json.decode(body)
                metadata = listing.get("metadata") or {}
                items.extend(listing.get("items") or ())
                version, token = str(metadata.get("resourceVersion") or ""), str(metadata.get("continue") or "")
        del body
        if not token:
            break
    with built_in_bulk():
        if kind == SLICES:
            state.replace_slices(items)
        else:
            state.replace(kind, items)
    return version


class _Event(msgspec.Struct):
    type: str = ""
    object: msgspec.Raw = msgspec.Raw(b"{}")


def _apply_slice_event(state: ClusterState, event: str, raw: bytes) -> None:
    """A slice's event, read as the LIST reads slices; one that cannot be read is said in the log."""
    try:
        published = published_slice(raw)
        state.apply_slice(event, published.key, published)
    except SliceError as error:
        log.error("ignoring a ResourceSlice %s event: %s", event, error)
        state.apply_slice(event, slice_key(raw), None)


def watch_kind(
    lister: Lister, state: ClusterState, kind: str, version: str, *, seconds: int, stop: threading.Event
) -> str:
    """Apply one watch's events from `version` until the server ends it; the last version seen."""
    response = lister(
        watch=True,
        resource_version=version,
        allow_watch_bookmarks=True,
        timeout_seconds=seconds,
        _preload_content=False,
        _request_timeout=(10, seconds + WATCH_READ_SLACK_S),
    )
    try:
        for line in iter_resp_lines(response):
            if stop.is_set():
                break
            event = msgspec.json.decode(line, type=_Event)
            raw = bytes(event.object)
            if kind == SLICES and event.type in ("ADDED", "MODIFIED", "DELETED"):
                _apply_slice_event(state, event.type, raw)
                version = _version_of(raw) or version
                continue
            obj = msgspec.json.decode(raw) or {}
            if event.type == "ERROR":
                if obj.get("code") == GONE:
                    raise VersionGoneError(obj.get("message", ""))
                raise client.ApiException(status=obj.get("code"), reason=f"{obj.get('reason')}: {obj.get('message')}")
            version = (obj.get("metadata") or {}).get("resourceVersion") or version
            if event.type in ("ADDED", "MODIFIED", "DELETED"):
                state.apply(event.type, kind, obj)
    finally:
        response.close()
        response.release_conn()
    return version


class _VersionedMetadata(msgspec.Struct):
    resourceVersion: str = ""  # noqa: N815 - the API's field name


class _Versioned(msgspec.Struct):
    metadata: _VersionedMetadata = msgspec.field(default_factory=_VersionedMetadata)


def _version_of(raw: bytes) -> str:
    return msgspec.json.decode(raw, type=_Versioned).metadata.resourceVersion


def run_informer(
    api: client.ApiClient,
    state: ClusterState,
    kind: str,
    stop: threading.Event,
    watch_seconds: int = WATCH_SECONDS,
    *,
    namespace: str = DEFAULT_NAMESPACE,
) -> None:
    """List, then watch for as long as the server keeps the version; list again only when it does
    not. `namespace` is the extender's own, where its preemption Leases live."""
    lister = lister_of(api, kind, namespace)
    while not stop.is_set():
        try:
            version = list_kind(lister, state, kind)
            while not stop.is_set():
                version = watch_kind(lister, state, kind, version, seconds=watch_seconds, stop=stop)
        except VersionGoneError as gone:
            log.info("%s watch: resourceVersion gone (%s); re-listing", kind, gone)
        except client.ApiException as error:
            if error.status in (403, 404) and kind in ClusterState.OPTIONAL_KINDS:
                if state.absent(kind):
                    _say_absent(kind, error.status)
                stop.wait(OPTIONAL_KIND_RETRY_S)  # the CRD may be installed after the extender starts
                continue
            log.warning("%s watch: %s %s; re-listing", kind, error.status, error.reason)
            stop.wait(1)
        except Exception as error:  # noqa: BLE001 - API restarts and dropped connections: re-list
            log.warning("%s watch interrupted: %s; re-listing", kind, error)
            stop.wait(1)
