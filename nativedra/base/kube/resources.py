"""References to the API resources nativedra reads and writes: one place for group, version and
plural, so a version bump is one edit. The kubernetes client has no typed DRA API, so DRA objects
go through `CustomObjectsApi` with these references."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes import client


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def list(self, api: client.ApiClient, **kwargs: Any) -> dict[str, Any]:
        """Every object of this resource in the cluster (all namespaces), as a dict."""
        return dict(client.CustomObjectsApi(api).list_cluster_custom_object(*self._path(), **kwargs))

    def get(self, api: client.ApiClient, name: str, namespace: str | None = None, **kwargs: Any) -> dict[str, Any]:
        objects = client.CustomObjectsApi(api)
        if self.namespaced:
            return dict(objects.get_namespaced_custom_object(*self._path(namespace), name, **kwargs))
        return dict(objects.get_cluster_custom_object(*self._path(), name, **kwargs))

    def create(
        self, api: client.ApiClient, body: dict[str, Any], namespace: str | None = None, *, dry_run: bool = False
    ) -> dict[str, Any]:
        """Create; with `dry_run`, only what the API server would store (its defaults applied, fields
        it does not serve dropped), nothing stored or shown to anyone."""
        objects = client.CustomObjectsApi(api)
        kwargs: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        if self.namespaced:
            return dict(objects.create_namespaced_custom_object(*self._path(namespace), body, **kwargs))
        return dict(objects.create_cluster_custom_object(*self._path(), body, **kwargs))

    def replace_status(
        self, api: client.ApiClient, name: str, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        """Write the status subresource (tests and benchmarks play the scheduler's allocator)."""
        objects = client.CustomObjectsApi(api)
        if self.namespaced:
            return dict(objects.replace_namespaced_custom_object_status(*self._path(namespace), name, body))
        return dict(objects.replace_cluster_custom_object_status(*self._path(), name, body))

    def apply_status(
        self,
        api: client.ApiClient,
        name: str,
        body: dict[str, Any],
        namespace: str | None,
        *,
        field_manager: str,
        timeout_s: float,
    ) -> None:
        """Server-side apply of the status subresource: the fields in `body` become `field_manager`'s,
        and what it owned before but left out is removed."""
        objects = client.CustomObjectsApi(api)
        kwargs: dict[str, Any] = {
            "field_manager": field_manager,
            "force": True,
            "_content_type": "application/apply-patch+yaml",
            "_request_timeout": timeout_s,
        }
        if self.namespaced:
            objects.patch_namespaced_custom_object_status(*self._path(namespace), name, body, **kwargs)
        else:
            objects.patch_cluster_custom_object_status(*self._path(), name, body, **kwargs)

    def patch(self, api: client.ApiClient, name: str, body: dict[str, Any], namespace: str | None = None) -> None:
        """A merge patch (e.g. suspending a JobSet)."""
        objects = client.CustomObjectsApi(api)
        if self.namespaced:
            objects.patch_namespaced_custom_object(*self._path(namespace), name, body)
        else:
            objects.patch_cluster_custom_object(*self._path(), name, body)

    def replace(
        self, api: client.ApiClient, name: str, body: dict[str, Any], *, dry_run: bool = False
    ) -> dict[str, Any]:
        """Cluster-scoped replace (the plugin's ResourceSlices); `dry_run` as in `create`."""
        kwargs: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        return dict(client.CustomObjectsApi(api).replace_cluster_custom_object(*self._path(), name, body, **kwargs))

    def delete(self, api: client.ApiClient, name: str) -> None:
        """Cluster-scoped delete."""
        client.CustomObjectsApi(api).delete_cluster_custom_object(*self._path(), name)

    def delete_namespaced(self, api: client.ApiClient, name: str, namespace: str) -> None:
        """Delete with its dependents first (foreground), as `kubectl delete --cascade=foreground`."""
        objects = client.CustomObjectsApi(api)
        objects.delete_namespaced_custom_object(*self._path(namespace), name, propagation_policy="Foreground")

    def lister(self, api: client.ApiClient) -> Any:
        """A list function over all namespaces, as `kubernetes.watch.Watch().stream` wants one."""
        objects = client.CustomObjectsApi(api)

        def list_all(**kwargs: Any) -> Any:
            return objects.list_cluster_custom_object(*self._path(), **kwargs)

        return list_all

    def _path(self, namespace: str | None = None) -> tuple[str, ...]:
        if namespace is None:
            return self.group, self.version, self.plural
        return self.group, self.version, namespace, self.plural


DRA_GROUP, DRA_VERSION = "resource.k8s.io", "v1"
RESOURCE_SLICES = Resource(DRA_GROUP, DRA_VERSION, "resourceslices", "ResourceSlice", namespaced=False)
RESOURCE_CLAIMS = Resource(DRA_GROUP, DRA_VERSION, "resourceclaims", "ResourceClaim", namespaced=True)
RESOURCE_CLAIM_TEMPLATES = Resource(
    DRA_GROUP, DRA_VERSION, "resourceclaimtemplates", "ResourceClaimTemplate", namespaced=True
)
DEVICE_CLASSES = Resource(DRA_GROUP, DRA_VERSION, "deviceclasses", "DeviceClass", namespaced=False)
JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", namespaced=True)
KUEUE_WORKLOADS = Resource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload", namespaced=True)
LEADER_WORKER_SETS = Resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet", namespaced=True)
COSCHEDULING_POD_GROUPS = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", namespaced=True)
# Kubernetes' own PodGroups (native gang scheduling): beta in 1.37, alpha (v1alpha2) in 1.36; both
# served only with the GenericWorkload gate and the version in --runtime-config.
NATIVE_POD_GROUPS = Resource("scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup", namespaced=True)
NATIVE_POD_GROUPS_V1ALPHA2 = Resource("scheduling.k8s.io", "v1alpha2", "podgroups", "PodGroup", namespaced=True)
