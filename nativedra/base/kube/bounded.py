"""API calls of a bounded duration, for callers that must answer within a deadline (the plugin
answers the kubelet within its DRA call timeout): no urllib3 retries, so a request's
`_request_timeout` is its whole duration, and a listing has a bound on its pages."""

from __future__ import annotations

import copy
from typing import Any

from kubernetes import client

from nativedra.base.kube.resources import Resource

LIST_PAGE = 500
MAX_LIST_PAGES = 1000  # x LIST_PAGE objects: far beyond any cluster, but a bound


class TooManyPagesError(Exception):
    """A listing that did not end within MAX_LIST_PAGES pages."""


def bounded_client(api: client.ApiClient) -> client.ApiClient:
    """A client whose requests are not retried: the default retries a timed-out GET three times,
    so one call could take four times its `_request_timeout`."""
    configuration = copy.deepcopy(api.configuration)
    configuration.retries = 0
    return client.ApiClient(configuration)


def list_all(api: client.ApiClient, resource: Resource, timeout_s: float) -> list[dict[str, Any]]:
    """Every object of `resource`, page by page, each page within `timeout_s` (pass a
    `bounded_client`). The client's errors pass through; a listing without end is TooManyPagesError."""
    objects: list[dict[str, Any]] = []
    token: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = resource.list(api, limit=LIST_PAGE, _continue=token, _request_timeout=timeout_s)
        objects += page.get("items", [])
        token = page.get("metadata", {}).get("continue")
        if not token:
            return objects
    raise TooManyPagesError(f"more than {MAX_LIST_PAGES} pages")
