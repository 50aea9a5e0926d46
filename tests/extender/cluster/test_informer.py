"""The informer's reading of the API's bytes: LISTs page by page, slices' watch events read as the LIST
reads them, and a slice that cannot be read loses nothing else. The API here is plain data (the
answers' bytes); the e2e tests read a real API server."""

from __future__ import annotations

import copy
import logging
import threading
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from extender.cluster.informer import LIST_PAGE, list_kind, watch_kind
from extender.cluster.state import ClusterState
from testkit.builders import DRIVER, node_objects


class Answers:
    """A LIST answered LIST_PAGE objects at a time, then one watch's events, as bytes."""

    def __init__(self, items: list[dict[str, Any]], events: list[dict[str, Any]] | None = None) -> None:
        self.items, self.events = items, events or []
        self.asked: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> Any:
        self.asked.append(kwargs)
        if kwargs.get("watch"):
            lines = b"".join(orjson.dumps(event) + b"\n" for event in self.events)
            return SimpleNamespace(stream=lambda **_: iter([lines]), close=lambda: None, release_conn=lambda: None)
        start = int(kwargs.get("_continue") or 0)
        end = start + kwargs["limit"]
        more = str(end) if end < len(self.items) else ""
        page = {"metadata": {"resourceVersion": "7", "continue": more}, "items": self.items[start:end]}
        return SimpleNamespace(data=orjson.dumps(page))


def _slices(count: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return node_objects({f"n{index}": {} for index in range(count)})


def test_a_list_is_read_page_by_page_and_nothing_is_lost() -> None:
    nodes, slices = _slices(LIST_PAGE + 1)  # more than a page holds
    state = ClusterState(DRIVER)
    for kind, items in (("nodes", nodes), ("resourceslices", slices)):
        answers = Answers(items)
        assert list_kind(answers, state, kind) == "7"
        pages = -(-len(items) // LIST_PAGE)
        assert [asked.get("_continue") for asked in answers.asked] == [None] + [
            str(LIST_PAGE * page) for page in range(1, pages)
        ]
    assert len(slices) > LIST_PAGE and len(state.slices) == len(slices)
    assert len(state.objects["nodes"]) == len(nodes)
    assert len(state.view().nodes) == len(nodes) and all(len(n.devices) == 8 for n in state.view().nodes.values())


def _watch(state: ClusterState, events: list[dict[str, Any]]) -> str:
    return watch_kind(Answers([], events), state, "resourceslices", "1", seconds=1, stop=threading.Event())


def test_slice_events_are_read_as_the_list_reads_them(caplog: pytest.LogCaptureFixture) -> None:
    nodes, slices = _slices(2)
    state = ClusterState(DRIVER)
    list_kind(Answers(nodes), state, "nodes")
    list_kind(Answers(slices[:1]), state, "resourceslices")
    tainted = copy.deepcopy(slices[0])
    tainted["metadata"]["resourceVersion"] = "9"
    tainted["spec"]["devices"][3]["taints"] = [{"key": "xid", "effect": "NoSchedule"}]
    broken = copy.deepcopy(slices[1])
    broken["metadata"]["resourceVersion"] = "10"
    broken["spec"]["devices"] = "no list"
    added = copy.deepcopy(slices[1])
    added["metadata"]["resourceVersion"] = "11"
    with caplog.at_level(logging.ERROR):
        version = _watch(
            state,
            [
                {"type": "MODIFIED", "object": tainted},
                {"type": "ADDED", "object": broken},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "10"}}},
            ],
        )
    assert version == "10"
    assert f"ResourceSlice {slices[1]['metadata']['name']}" in caplog.text, "the slice that cannot be read is named"
    view = state.view()
    assert view.nodes[slices[0]["spec"]["nodeName"]].devices["gpu-3"].tainted
    assert not view.nodes[slices[1]["spec"]["nodeName"]].devices, "nothing planned from a slice not read"
    assert _watch(state, [{"type": "ADDED", "object": added}]) == "11"
    assert len(state.view().nodes[slices[1]["spec"]["nodeName"]].devices) == 8
    _watch(state, [{"type": "DELETED", "object": tainted}])
    assert not state.view().nodes[slices[0]["spec"]["nodeName"]].devices
