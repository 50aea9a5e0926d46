"""Whether a claim is this plugin's to prepare on this node, and why not: each refusal names the
claim and the field."""

from __future__ import annotations

import uuid

import pytest

from dra_driver.errors import PrepareError
from dra_driver.kubelet.claim import ClaimRef, check_uid, our_results
from nativedra.base.kube.names import DRIVER_NAME
from tests.dra_driver.claims import NODE, claim


@pytest.mark.parametrize("uid", ["", "../../etc", "ABCDEF00-0000-4000-8000-000000000000", f"{uuid.uuid4()}\n"])
def test_a_uid_that_is_not_a_kubernetes_uid_is_refused_and_shown_as_given(uid: str) -> None:
    with pytest.raises(PrepareError) as error:
        check_uid(ClaimRef("ns", uid, "train"))
    assert error.value.reason == "bad_uid" and f"claim ns/train: field uid {uid!r}" in str(error.value)


def test_only_the_results_of_this_driver_in_this_nodes_pool_are_ours() -> None:
    uid = str(uuid.uuid4())
    allocated = claim(uid, ("gpu-0", "gpu-1"))
    results = allocated["status"]["allocation"]["devices"]["results"]
    results.append({"request": "gpus", "driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-2"})
    results.append({**results[0], "pool": "node-b", "device": "gpu-3"})
    assert [r["device"] for r in our_results(allocated, ClaimRef("ns", uid, "train"), NODE)] == ["gpu-0", "gpu-1"]


def test_a_claim_allocated_elsewhere_names_where() -> None:
    uid = str(uuid.uuid4())
    with pytest.raises(PrepareError) as error:
        our_results(claim(uid, pool="node-b"), ClaimRef("ns", uid, "train"), NODE)
    assert error.value.reason == "not_ours"
    assert f"in pool node-a (allocated: {DRIVER_NAME}/node-b)" in str(error.value)
