"""The kube-scheduler extender wire format."""

from __future__ import annotations

import json

import pytest

from extender.wire import ExtenderArgs, ExtenderFilterResult, encode_priorities, filter_result


def test_filter_answers_in_the_form_the_scheduler_sent() -> None:
    by_names = ExtenderArgs.model_validate({"Pod": {}, "NodeNames": ["a", "b"]})
    answer = filter_result(by_names, ["a"], {"b": "why"})
    assert answer == ExtenderFilterResult(NodeNames=["a"], FailedNodes={"b": "why"}).model_dump_json().encode()
    nodes = {"kind": "NodeList", "items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]}
    full = json.loads(filter_result(ExtenderArgs.model_validate({"Pod": {}, "Nodes": nodes}), ["b"], {"a": "why"}))
    assert full["NodeNames"] is None and [n["metadata"]["name"] for n in full["Nodes"]["items"]] == ["b"]
    assert full["FailedNodes"] == {"a": "why"}
    retry = filter_result(by_names, ["a"], {}, "gang g: waiting to see its template")
    assert retry == ExtenderFilterResult(Error="gang g: waiting to see its template").model_dump_json().encode()


def test_prioritize_lists_only_the_nodes_it_scores_above_zero() -> None:
    """kube-scheduler gives an unlisted host 0 from this extender, so zeros need not travel."""
    assert encode_priorities({}) == b"[]"
    assert json.loads(encode_priorities({"a": 0, "b": 7, "c": 10})) == [
        {"Host": "b", "Score": 7},
        {"Host": "c", "Score": 10},
    ]
    with pytest.raises(ValueError, match=r"outside 0\.\.10"):
        encode_priorities({"a": 11})
