"""The DRA servicer answers each claim of a kubelet call once, with a clean error for bad input."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from dra_driver.kubelet.claim import ClaimRef, ClaimSources
from dra_driver.kubelet.grpc_server import ClaimPool, DraServicer
from dra_driver.proto.gen.dra.v1 import api_pb2 as dra_v1
from tests.dra_driver.claims import Node, claim, new_claim


@pytest.fixture
def pool() -> Iterator[ClaimPool]:
    claim_pool = ClaimPool(workers=2)
    yield claim_pool
    claim_pool.shutdown()


def _prepare(node: Node, pool: ClaimPool, claims: list[tuple[str, str, str]]) -> Any:
    request = dra_v1.NodePrepareResourcesRequest(
        claims=[dra_v1.Claim(namespace=n, uid=u, name=c) for n, u, c in claims]
    )
    return DraServicer(node.preparer(), dra_v1, pool).NodePrepareResources(request, None)


def test_the_same_claim_three_times_in_one_call_is_prepared_once(node: Node, pool: ClaimPool) -> None:
    ref = new_claim(node)
    response = _prepare(node, pool, [("ns", ref.uid, "train")] * 3)
    assert list(response.claims) == [ref.uid]
    entry = response.claims[ref.uid]
    assert entry.error == "" and [d.device_name for d in entry.devices] == ["gpu-0-1of2-0"]


@pytest.mark.parametrize(
    "uid", ["../../etc/passwd", "0c9e7d8a-6f1b-4b7e-9c1d-2f3a4b5c6d7e\n", "0C9E7D8A-6F1B-4B7E-9C1D-2F3A4B5C6D7E"]
)
def test_a_malformed_uid_gets_a_clean_error_naming_claim_and_field(
    node: Node, pool: ClaimPool, uid: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    error = _prepare(node, pool, [("ns", uid, "train")]).claims[uid].error
    assert "claim ns/train" in error and "field uid" in error and repr(uid) in error
    assert "internal error" not in error
    assert not [record for record in caplog.records if record.exc_info], "no traceback in the log"
    assert node.specs.claim_uids() == set() and node.checkpoint().read() == {}
    unprepare = dra_v1.NodeUnprepareResourcesRequest(claims=[dra_v1.Claim(namespace="ns", uid=uid, name="train")])
    unprepared = DraServicer(node.preparer(), dra_v1, pool).NodeUnprepareResources(unprepare, None)
    assert "field uid" in unprepared.claims[uid].error


def test_the_claims_of_one_call_are_prepared_side_by_side_and_a_failure_stays_with_its_claim(
    node: Node, pool: ClaimPool
) -> None:
    keys = []
    for i in range(6):
        uid = str(uuid.uuid4())
        node.claims[f"train-{i}"] = claim(uid, devices=(f"gpu-{i}",), pool="node-b" if i == 3 else "node-a")
        node.claims[f"train-{i}"]["metadata"]["name"] = f"train-{i}"
        keys.append(("ns", uid, f"train-{i}"))
    together = threading.Barrier(2, timeout=10)  # broken (an error) unless two claims are read at once

    def read_claim(ref: ClaimRef) -> dict[str, Any]:
        if ref.name in ("train-0", "train-1"):
            together.wait()
        return node.read_claim(ref)

    preparer = node.preparer(sources=ClaimSources(read_claim, node.list_claims))
    request = dra_v1.NodePrepareResourcesRequest(claims=[dra_v1.Claim(namespace=n, uid=u, name=c) for n, u, c in keys])
    response = DraServicer(preparer, dra_v1, pool).NodePrepareResources(request, None)
    assert sorted(response.claims) == sorted(uid for _, uid, _ in keys), "one entry per claim"
    for i, (_, uid, _) in enumerate(keys):
        entry = response.claims[uid]
        if i == 3:
            assert "pool node-a" in entry.error and not entry.devices
        else:
            assert entry.error == "" and [d.device_name for d in entry.devices] == [f"gpu-{i}"]
    assert node.specs.claim_uids() == {uid for i, (_, uid, _) in enumerate(keys) if i != 3}
    unprepare = dra_v1.NodeUnprepareResourcesRequest(
        claims=[dra_v1.Claim(namespace=n, uid=u, name=c) for n, u, c in keys]
    )
    unprepared = DraServicer(preparer, dra_v1, pool).NodeUnprepareResources(unprepare, None)
    assert all(unprepared.claims[uid].error == "" for _, uid, _ in keys)
    assert node.specs.claim_uids() == set() and node.checkpoint().read() == {}
