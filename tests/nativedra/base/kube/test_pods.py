"""How a pod's claims are named: directly, or generated from a template (listed in its status)."""

from __future__ import annotations

from nativedra.base.kube.pods import pod_claim_names


def test_direct_generated_and_not_yet_generated_claims() -> None:
    pod = {
        "spec": {
            "resourceClaims": [
                {"name": "shared", "resourceClaimName": "team-claim"},
                {"name": "gpus", "resourceClaimTemplateName": "two-gpus"},
                {"name": "later", "resourceClaimTemplateName": "one-gpu"},
            ]
        },
        "status": {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "pod-gpus-x7k2"}]},
    }
    assert pod_claim_names(pod) == {"shared": "team-claim", "gpus": "pod-gpus-x7k2", "later": None}


def test_a_pod_without_claims_or_status_has_none() -> None:
    assert pod_claim_names({"spec": {}}) == {}
    assert pod_claim_names({}) == {}
