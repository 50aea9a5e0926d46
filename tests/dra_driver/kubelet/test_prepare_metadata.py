"""Device metadata (KEP-5304) through the whole prepare protocol, on plain data: the files on the
host, the read-only mounts in the claim's CDI spec, the answer, and the start-up repair."""

from __future__ import annotations

import json
import stat
import uuid
from typing import Any

import pytest
import yaml

from dra_driver.kubelet.checkpoint import ClaimRecord, ClaimState
from dra_driver.kubelet.claim import ClaimRef
from dra_driver.kubelet.device_metadata import render
from dra_driver.kubelet.repair import reconcile
from nativedra.base.kube.names import CDI_KIND, DRIVER_NAME
from tests.dra_driver.claims import NODE, PUBLISHED, Node, claim, new_claim
from tests.dra_driver.kubelet.test_device_metadata import objects

POD_CLAIM_DIR = "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpu"  # pod claim `gpu`


def template_claim(node: Node) -> ClaimRef:
    """A claim generated for pod claim `gpu`: two whole GPUs for `gpus`, a quarter for `small`."""
    ref = new_claim(node, devices=("gpu-0", "gpu-1"))
    body = node.claims["train"]
    body["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpu"}
    results = body["status"]["allocation"]["devices"]["results"]
    results.append({"request": "small/quarter", "driver": DRIVER_NAME, "pool": NODE, "device": "gpu-2-1of4-0"})
    return ref


def files(node: Node, uid: str) -> dict[str, bytes]:
    claim_dir = node.metadata.claim_dir(uid)
    return {p.name: p.read_bytes() for p in sorted(claim_dir.iterdir())} if claim_dir.exists() else {}


def test_each_request_gets_its_file_mounted_read_only_through_its_first_device(node: Node) -> None:
    ref = template_claim(node)
    answer = node.preparer().prepare(ref)

    kind = CDI_KIND
    assert [device.cdi_device_ids for device in answer] == [
        [f"{kind}={ref.uid}-gpu-0", f"{kind}={ref.uid}_metadata_gpus"],
        [f"{kind}={ref.uid}-gpu-1"],
        [f"{kind}={ref.uid}-gpu-2-1of4-0", f"{kind}={ref.uid}_metadata_small"],
    ]
    spec = yaml.safe_load(node.specs.path_for(ref.uid).read_text())
    mounts = {d["name"]: d["containerEdits"]["mounts"] for d in spec["devices"] if "mounts" in d["containerEdits"]}
    host_dir = node.root / "plugin-data" / "dra-device-metadata" / ref.uid
    assert mounts == {
        f"{ref.uid}_metadata_{request}": [
            {
                "hostPath": str(host_dir / f"{request}.json"),
                "containerPath": f"{POD_CLAIM_DIR}/{request}/{DRIVER_NAME}-metadata.json",
                "options": ["ro", "bind"],
            }
        ]
        for request in ("gpus", "small")
    }

    for request, devices in (("gpus", ["gpu-0", "gpu-1"]), ("small", ["gpu-2-1of4-0"])):
        path = host_dir / f"{request}.json"
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        for document in objects(path.read_text()):
            assert document["metadata"]["uid"] == ref.uid and document["podClaimName"] == "gpu"
            [entry] = document["requests"]
            assert [d["name"] for d in entry["devices"]] == devices
            assert all(d["attributes"] == PUBLISHED[d["name"]].api["attributes"] for d in entry["devices"])
    record = node.checkpoint().read()[ref.uid]
    assert {f"{request}.json": render(document).encode() for request, document in record.metadata.items()} == files(
        node, ref.uid
    )


def test_prepare_again_leaves_the_files_alone_and_brings_back_a_lost_one(node: Node) -> None:
    ref = template_claim(node)
    preparer = node.preparer()
    preparer.prepare(ref)
    before = files(node, ref.uid)
    inode = node.metadata.path_for(ref.uid, "gpus").stat().st_ino
    preparer.prepare(ref)
    assert files(node, ref.uid) == before
    assert node.metadata.path_for(ref.uid, "gpus").stat().st_ino == inode, "an identical file is not rewritten"

    del node.claims["train"]  # the answer and the files come from the checkpoint
    node.metadata.path_for(ref.uid, "small").unlink()
    node.metadata.path_for(ref.uid, "gpus").write_text("edited")
    preparer.prepare(ref)
    assert files(node, ref.uid) == before


def test_unprepare_removes_the_claims_metadata(node: Node) -> None:
    ref = template_claim(node)
    other = ClaimRef("ns", str(uuid.uuid4()), "other")
    node.claims["other"] = claim(other.uid, devices=("gpu-5",))
    node.claims["other"]["metadata"]["name"] = "other"
    preparer = node.preparer()
    preparer.prepare(ref)
    preparer.prepare(other)
    preparer.unprepare(ref)
    assert not node.metadata.claim_dir(ref.uid).exists()
    assert node.metadata.claim_uids() == {other.uid}
    preparer.unprepare(ref)


def test_reconcile_restores_lost_metadata_rolls_back_half_prepared_and_removes_orphans(node: Node) -> None:
    ref = new_claim(node)
    node.preparer().prepare(ref)
    text = node.metadata.path_for(ref.uid, "gpus").read_text()
    node.metadata.remove(ref.uid)

    half, orphan = str(uuid.uuid4()), str(uuid.uuid4())
    started = ClaimRecord(half, "ns", "half", ClaimState.PREPARE_STARTED, [], None, {"gpus": {}})
    node.checkpoint().update(lambda records: records.__setitem__(half, started))
    for uid in (half, orphan):  # a crash after the files were written
        with node.metadata.staged(uid, {"gpus": "{}\n"}) as publish:
            publish()

    done = reconcile(node.preparer())
    assert done == {
        "restored": [ref.uid],
        "rolled_back": [half],
        "rebuilt": [],
        "orphans_removed": [orphan],
        "deferred_for": [],
    }
    assert node.metadata.path_for(ref.uid, "gpus").read_text() == text
    assert node.metadata.claim_uids() == {ref.uid}


def test_a_corrupted_checkpoint_keeps_the_files_and_answer_and_makes_a_lost_file_again(node: Node) -> None:
    ref = template_claim(node)
    answer = node.preparer().prepare(ref)
    before = files(node, ref.uid)
    node.metadata.path_for(ref.uid, "small").unlink()
    node.checkpoint_path.write_text(node.checkpoint_path.read_text().replace("PrepareCompleted", "PrepareCompleteX"))

    assert reconcile(node.preparer())["rebuilt"] == [ref.uid]
    assert files(node, ref.uid) == before
    node.claims.clear()
    assert node.preparer().prepare(ref) == answer


def test_a_spec_from_before_device_metadata_is_rebuilt_with_an_answer_that_mounts_none(node: Node) -> None:
    ref = new_claim(node, devices=("gpu-0",))
    node.preparer().prepare(ref)
    old = yaml.safe_load(node.specs.read_text(ref.uid))
    old["devices"] = [d for d in old["devices"] if "_metadata_" not in d["name"]]
    node.specs.write_text(ref.uid, yaml.safe_dump(old))
    node.metadata.remove(ref.uid)
    node.checkpoint_path.unlink()

    assert reconcile(node.preparer())["rebuilt"] == [ref.uid]
    [device] = node.checkpoint().read()[ref.uid].devices
    assert device["cdi_device_ids"] == [f"{CDI_KIND}={ref.uid}-gpu-0"]
    assert not node.metadata.claim_dir(ref.uid).exists()


def test_a_record_written_before_device_metadata_still_loads() -> None:
    record: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "namespace": "ns",
        "name": "train",
        "state": "PrepareCompleted",
        "devices": [],
        "cdiSpec": "spec",
    }
    assert ClaimRecord.from_json(record).metadata == {}
    with pytest.raises(ValueError, match="metadata is not an object of objects"):
        ClaimRecord.from_json({**record, "metadata": {"gpus": "text"}})
    assert json.loads(json.dumps(ClaimRecord.from_json(record).to_json()))["metadata"] == {}
