"""How a pod names its ResourceClaims (pure; pods as API dicts)."""

from __future__ import annotations

from typing import Any


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
