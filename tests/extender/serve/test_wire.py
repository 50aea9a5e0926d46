"""The kube-scheduler extender wire format."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from extender.serve.wire import (
    ExtenderArgs,
    ExtenderFilterResult,
    MalformedBodyError,
    _flat_strings,
    _parsed,
    encode_priorities,
    filter_result,
    parse_args,
)

NODE_NAME_PATTERN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,20}[a-z0-9])?")  # a DNS subdomain
NODE_NAME = st.from_regex(NODE_NAME_PATTERN, fullmatch=True)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
# What may arrive as NodeNames: node names mixed with any JSON, texts with commas, quotes and
# brackets, or something that is no array at all.
NODE_NAMES = st.lists(NODE_NAME | JSON_VALUES | st.sampled_from(["a,b", 'a"b', "[", "a]", "\\", "é"]), max_size=6)
SEPARATORS = st.sampled_from([(",", ":"), (", ", ": "), (" , ", " : "), (",\n", ":")])  # Go's, Python's, odd ones
POD = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": []}}


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


@settings(max_examples=300, deadline=None)
@given(scores=st.dictionaries(NODE_NAME | st.text(max_size=12), st.integers(0, 10)))
def test_the_prioritize_answer_is_each_scored_node_whatever_its_name(scores: dict[str, int]) -> None:
    """Node names get a fast encoding; any other text (quotes, commas, colons, escapes) the plain one."""
    assert json.loads(encode_priorities(scores)) == [{"Host": h, "Score": s} for h, s in scores.items() if s]


def _outcome(parse: Any, body: bytes) -> tuple[str, Any]:
    try:
        args = parse(body)
    except MalformedBodyError as error:
        return "refused", str(error)
    return "parsed", (args.Pod, args.node_names(), json.loads(filter_result(args, None, {})))


@settings(max_examples=400, deadline=None)
@given(names=NODE_NAMES | JSON_VALUES, separators=SEPARATORS)
@example(names=[{"a": 1}], separators=(",", ":"))  # an object's key holds the quotes of one string
@example(names=[["a"]], separators=(",", ":"))
@example(names=["a,", 1], separators=(",", ":"))  # a comma inside a string stands in for a string
@example(names=['""', 1], separators=(",", ":"))  # escaped quotes stand in for a string
@example(names="[1]", separators=(",", ":"))  # a string that looks like an array
def test_names_are_kept_as_sent_only_when_every_one_is_a_string(names: Any, separators: tuple[str, str]) -> None:
    """The byte counts never pass an array that holds anything but strings, and always pass
    what the scheduler sends (node names, any JSON spacing)."""
    array = json.dumps(names, separators=separators).encode()
    if _flat_strings(array):
        assert isinstance(names, list) and names and all(isinstance(name, str) for name in names)
    node_names = isinstance(names, list) and all(isinstance(n, str) and NODE_NAME_PATTERN.fullmatch(n) for n in names)
    if names and node_names:
        assert _flat_strings(array), array


@settings(max_examples=400, deadline=None)
@given(names=NODE_NAMES | JSON_VALUES, separators=SEPARATORS)
def test_a_body_parses_and_answers_the_same_with_its_names_kept_as_sent(
    names: Any, separators: tuple[str, str]
) -> None:
    """Same arguments, same fast-path answer, same refusal naming the same field as the full parse."""
    body = json.dumps({"Pod": POD, "NodeNames": names}, separators=separators).encode()
    assert _outcome(parse_args, body) == _outcome(_parsed, body)
