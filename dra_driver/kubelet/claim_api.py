"""Claims read from the API server within a bound, so that the kubelet, which waits for every
prepare, gets an answer before its DRA call times out: a missing claim, a failed read or an API
server that does not answer is an error naming the claim."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from urllib3.exceptions import HTTPError

from dra_driver.errors import PrepareError
from dra_driver.kubelet.claim import ClaimLister, ClaimReader, ClaimRef, ClaimSources
from nativedra.base.kube.bounded import TooManyPagesError, bounded_client, list_all
from nativedra.base.kube.resources import RESOURCE_CLAIMS

# Every API call made while the kubelet waits ends well before the kubelet's DRA call timeout (45 s).
API_TIMEOUT_S = 10.0


def api_claim_sources(api: client.ApiClient, timeout_s: float = API_TIMEOUT_S) -> ClaimSources:
    return ClaimSources(api_claim_reader(api, timeout_s), api_claim_lister(api, timeout_s))


def api_claim_reader(api: client.ApiClient, timeout_s: float = API_TIMEOUT_S) -> ClaimReader:
    """Reads one claim, within `timeout_s`."""
    bounded = bounded_client(api)

    def read(ref: ClaimRef) -> dict[str, Any]:
        try:
            return RESOURCE_CLAIMS.get(bounded, ref.name, ref.namespace, _request_timeout=timeout_s)
        except client.ApiException as error:
            if error.status == 404:
                raise PrepareError("not_found", f"claim {ref}: not found in the API") from error
            raise PrepareError("api_error", f"claim {ref}: reading it failed: {error.status} {error.reason}") from error
        except HTTPError as error:  # no answer in time, connection refused or reset
            cause = getattr(error, "reason", None) or error
            raise PrepareError(
                "api_error",
                f"claim {ref}: reading it from the API server failed within {timeout_s:g} s "
                f"({type(cause).__name__}: {cause})",
            ) from error

    return read


def api_claim_lister(api: client.ApiClient, timeout_s: float = API_TIMEOUT_S) -> ClaimLister:
    """Lists every ResourceClaim page by page, each page within `timeout_s` (start-up repair)."""
    bounded = bounded_client(api)

    def list_claims() -> list[dict[str, Any]]:
        try:
            return list_all(bounded, RESOURCE_CLAIMS, timeout_s)
        except (client.ApiException, HTTPError) as error:
            raise PrepareError("api_error", f"listing ResourceClaims failed: {error}") from error
        except TooManyPagesError as error:
            raise PrepareError("api_error", f"listing ResourceClaims: {error}") from error

    return list_claims
