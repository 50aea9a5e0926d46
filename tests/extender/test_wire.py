"""The kube-scheduler extender wire format."""

from __future__ import annotations

from extender.wire import ExtenderArgs, filter_result


def test_filter_answers_in_the_form_the_scheduler_sent() -> None:
    by_names = ExtenderArgs.model_validate({"Pod": {}, "NodeNames": ["a", "b"]})
    assert filter_result(by_names, ["a"], {"b": "why"}).model_dump()["NodeNames"] == ["a"]
    nodes = {"kind": "NodeList", "items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]}
    full = filter_result(ExtenderArgs.model_validate({"Pod": {}, "Nodes": nodes}), ["b"], {"a": "why"}).model_dump()
    assert full["NodeNames"] is None and [n["metadata"]["name"] for n in full["Nodes"]["items"]] == ["b"]
    assert full["FailedNodes"] == {"a": "why"}
