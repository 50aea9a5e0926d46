"""How a pod names its ResourceClaims (pure; pods as API dicts)."""

from __future__ import annotations

from typing import Any

from nativedra.base.kube.units import quantity


def pod_claim_names(pod: dict[str, Any]) -> dict[str, str | None]:
    """Pod-level claim name -> ResourceClaim name: named directly, or generated from a template and
    listed in the pod's status (None until the controller has created it)."""
    generated = {
        s["name"]: s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    return {
        reference["name"]: reference.get("resourceClaimName") or generated.get(reference["name"])
        for reference in (pod.get("spec") or {}).get("resourceClaims") or []
    }


# The extended resource every DeviceClass answers to (DRAExtendedResource), besides the
# extendedResourceName it may set: "deviceclass.resource.kubernetes.io/<class name>".
CLASS_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"


def _extended(name: str) -> bool:
    """A domain-qualified resource outside Kubernetes' own names (those may come from DRA)."""
    domain = name.split("/", 1)[0] if "/" in name else ""
    native = domain == "kubernetes.io" or domain.endswith(".kubernetes.io")
    return bool(domain) and (not native or name.startswith(CLASS_RESOURCE_PREFIX))


def extended_resources(pod: dict[str, Any]) -> dict[str, int]:
    """The extended resources the pod asks for, as the scheduler counts them: the sum over its
    containers, or the most any init container asks, whichever is larger."""
    spec = pod.get("spec") or {}

    def asked(container: dict[str, Any]) -> dict[str, int]:
        resources = container.get("resources") or {}
        merged = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        found = {}
        for name, value in merged.items():
            if _extended(name):
                try:
                    found[name] = int(quantity(value))
                except ValueError as error:
                    raise ValueError(f"container {container.get('name')!r}, resource {name!r}: {error}") from None
        return found

    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for name, amount in asked(container).items():
            total[name] = total.get(name, 0) + amount
    for container in spec.get("initContainers") or []:
        for name, amount in asked(container).items():
            total[name] = max(total.get(name, 0), amount)
    return total


def extended_claim_name(pod: dict[str, Any]) -> str | None:
    """The claim the scheduler made for the pod's extended resources, once it has."""
    status = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    return status.get("resourceClaimName") or None


def pod_claims(pod: dict[str, Any]) -> tuple[dict[str, str | None], str | None, dict[str, int]]:
    """Everything the pod says of its claims, read in one go: `pod_claim_names`,
    `extended_claim_name` and `extended_resources`."""
    return pod_claim_names(pod), extended_claim_name(pod), extended_resources(pod)
