"""The DRA servicer answers each claim of a kubelet call once, with a clean error for bad input."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from dra_driver.grpc_server import DraServicer
from dra_driver.proto.gen.dra.v1 import api_pb2 as dra_v1
from tests.dra_driver.claims import Node, new_claim


def _prepare(node: Node, claims: list[tuple[str, str, str]]) -> Any:
    request = dra_v1.NodePrepareResourcesRequest(
        claims=[dra_v1.Claim(namespace=n, uid=u, name=c) for n, u, c in claims]
    )
    return DraServicer(node.preparer(), dra_v1).NodePrepareResources(request, None)


def test_the_same_claim_three_times_in_one_call_is_prepared_once(node: Node) -> None:
    ref = new_claim(node)
    response = _prepare(node, [("ns", ref.uid, "train")] * 3)
    assert list(response.claims) == [ref.uid]
    entry = response.claims[ref.uid]
    assert entry.error == "" and [d.device_name for d in entry.devices] == ["gpu-0-1of2-0"]


@pytest.mark.parametrize(
    "uid", ["../../etc/passwd", "0c9e7d8a-6f1b-4b7e-9c1d-2f3a4b5c6d7e\n", "0C9E7D8A-6F1B-4B7E-9C1D-2F3A4B5C6D7E"]
)
def test_a_malformed_uid_gets_a_clean_error_naming_claim_and_field(
    node: Node, uid: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    error = _prepare(node, [("ns", uid, "train")]).claims[uid].error
    assert "claim ns/train" in error and "field uid" in error and repr(uid) in error
    assert "internal error" not in error
    assert not [record for record in caplog.records if record.exc_info], "no traceback in the log"
    assert node.specs.claim_uids() == set() and node.checkpoint().read() == {}
    unprepare = dra_v1.NodeUnprepareResourcesRequest(claims=[dra_v1.Claim(namespace="ns", uid=uid, name="train")])
    unprepared = DraServicer(node.preparer(), dra_v1).NodeUnprepareResources(unprepare, None)
    assert "field uid" in unprepared.claims[uid].error
