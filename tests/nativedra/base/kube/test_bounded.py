"""A bounded client never retries, and a listing follows its pages to the end, within a bound."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client

from nativedra.base.kube import bounded
from nativedra.base.kube.bounded import TooManyPagesError, bounded_client, list_all
from nativedra.base.kube.resources import Resource


def test_a_bounded_client_does_not_retry_and_leaves_the_original_as_it_was() -> None:
    api = client.ApiClient(client.Configuration())
    api.configuration.retries = 3
    assert bounded_client(api).configuration.retries == 0
    assert api.configuration.retries == 3


@dataclass(frozen=True)
class Pages(Resource):
    """A resource whose listing has `pages` pages, recording how each was asked for."""

    pages: int = 1
    asked: list[dict[str, Any]] = field(default_factory=list)

    def list(self, api: client.ApiClient, **kwargs: Any) -> dict[str, Any]:
        self.asked.append(kwargs)
        page = len(self.asked)
        token = str(page) if page < self.pages else None
        return {"items": [{"page": page}], "metadata": {"continue": token}}


def test_a_listing_follows_every_page_each_within_the_timeout() -> None:
    resource = Pages("example.com", "v1", "things", "Thing", True, pages=3)
    assert list_all(client.ApiClient(), resource, timeout_s=2) == [{"page": 1}, {"page": 2}, {"page": 3}]
    assert [a["_continue"] for a in resource.asked] == [None, "1", "2"]
    assert all(a["_request_timeout"] == 2 and a["limit"] == bounded.LIST_PAGE for a in resource.asked)


def test_a_listing_without_end_stops_at_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bounded, "MAX_LIST_PAGES", 4)
    resource = Pages("example.com", "v1", "things", "Thing", True, pages=10)
    with pytest.raises(TooManyPagesError, match="more than 4 pages"):
        list_all(client.ApiClient(), resource, timeout_s=2)
    assert len(resource.asked) == 4
