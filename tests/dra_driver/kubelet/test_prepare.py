"""ClaimPreparer against plain data: claims are dicts handed over by a plain function, devices
come from the real slice builder, files go to a temporary CDI directory and checkpoint."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.errors import PrepareError
from dra_driver.kubelet import checkpoint as checkpoint_module
from dra_driver.kubelet.checkpoint import ClaimState
from dra_driver.kubelet.claim import ClaimRef, PreparedDevice
from nativedra.base.kube.names import CDI_KIND
from tests.dra_driver.claims import NODE, Node, new_claim


def test_prepare_writes_the_spec_and_a_completed_record(node: Node) -> None:
    ref = new_claim(node)
    answer = node.preparer().prepare(ref)
    cdi_ids = [
        f"{CDI_KIND}={ref.uid}-gpu-0-1of2-0",
        f"{CDI_KIND}={ref.uid}_metadata_gpus",
    ]
    assert answer == [PreparedDevice(["gpus"], NODE, "gpu-0-1of2-0", cdi_ids)]
    spec = yaml.safe_load(node.specs.path_for(ref.uid).read_text())
    device, _metadata = spec["devices"]
    assert device["name"] == f"{ref.uid}-gpu-0-1of2-0"
    assert "NATIVEDRA_COMPUTE_PERCENT=50" in device["containerEdits"]["env"]
    assert [n["path"] for n in device["containerEdits"]["deviceNodes"]] == ["/dev/nvidia0"]
    record = node.checkpoint().read()[ref.uid]
    assert record.state is ClaimState.PREPARE_COMPLETED
    assert record.cdi_spec == node.specs.path_for(ref.uid).read_text()


def test_prepare_again_gives_the_same_answer_without_reading_the_claim(node: Node) -> None:
    ref = new_claim(node)
    preparer = node.preparer()
    first = preparer.prepare(ref)
    text = node.specs.path_for(ref.uid).read_text()
    del node.claims["train"]  # a second read would now fail
    node.specs.remove(ref.uid)  # and a lost spec comes back
    assert preparer.prepare(ref) == first
    assert node.specs.path_for(ref.uid).read_text() == text
    assert list(node.checkpoint().read()) == [ref.uid]


def test_unprepare_removes_spec_and_record_and_may_repeat(node: Node) -> None:
    ref = new_claim(node)
    preparer = node.preparer()
    preparer.prepare(ref)
    preparer.unprepare(ref)
    assert not node.specs.exists(ref.uid)
    assert node.checkpoint().read() == {}
    preparer.unprepare(ref)  # the kubelet retries; an unknown claim is already unprepared


@pytest.mark.parametrize(
    ("kwargs", "reason", "field"),
    [
        ({"allocated": False}, "not_allocated", "status.allocation is empty"),
        ({"pool": "node-b"}, "not_ours", "status.allocation.devices.results has no device"),
        ({"driver": "gpu.nvidia.com"}, "not_ours", "status.allocation.devices.results has no device"),
        ({"devices": ("gpu-9",)}, "unknown_device", "device gpu-9 is not published by node node-a"),
    ],
)
def test_a_claim_we_cannot_prepare_is_named_with_the_field_and_nothing_is_written(
    node: Node, kwargs: dict[str, Any], reason: str, field: str
) -> None:
    ref = new_claim(node, **kwargs)
    with pytest.raises(PrepareError) as error:
        node.preparer().prepare(ref)
    assert error.value.reason == reason
    assert f"claim ns/train ({ref.uid})" in str(error.value) and field in str(error.value)
    assert not node.specs.exists(ref.uid) and node.checkpoint().read() == {}


def test_a_re_created_claim_is_refused_with_both_uids(node: Node) -> None:
    ref = new_claim(node)
    stale = ClaimRef("ns", str(uuid.uuid4()), "train")
    with pytest.raises(PrepareError) as error:
        node.preparer().prepare(stale)
    assert error.value.reason == "uid_mismatch"
    message = str(error.value)
    assert "claim ns/train" in message and f"metadata.uid is {ref.uid}" in message and stale.uid in message


def test_a_mig_placement_is_refused_when_the_backend_cannot_prepare_mig(node: Node) -> None:
    ref = new_claim(node, devices=("gpu-6-1g-10gb-3",))
    with pytest.raises(PrepareError, match="gpu-6-1g-10gb-3 is a MIG placement") as error:
        node.preparer(mig_supported=False).prepare(ref)
    assert error.value.reason == "unsupported"
    assert not node.specs.exists(ref.uid)


def test_a_mig_placement_is_described_to_the_container_when_the_backend_can_prepare_mig(node: Node) -> None:
    ref = new_claim(node, devices=("gpu-6-1g-10gb-3",))
    node.preparer(mig_supported=True).prepare(ref)
    device, _metadata = yaml.safe_load(node.specs.path_for(ref.uid).read_text())["devices"]
    assert {"NATIVEDRA_MIG_PROFILE=1g.10gb", "NATIVEDRA_MIG_PLACEMENT=3"} <= set(device["containerEdits"]["env"])
    assert [n["path"] for n in device["containerEdits"]["deviceNodes"]] == ["/dev/nvidia6"]


def test_a_failure_after_the_claim_was_read_names_the_pods_it_is_reserved_for(node: Node) -> None:
    ref = new_claim(node, pool="node-b")
    pod = {"resource": "pods", "name": "trainer-0", "uid": str(uuid.uuid4())}
    node.claims["train"]["status"]["reservedFor"] = [pod]
    with pytest.raises(PrepareError):
        node.preparer().prepare(ref)
    [(failed, error)] = node.failures
    assert failed == ref and error.reason == "not_ours" and error.reserved_for == [pod]


def test_a_prepare_waits_for_one_directory_fsync_of_the_checkpoint(node: Node, synced_directories: list[Path]) -> None:
    """PrepareStarted is renamed into place without the directory fsync that PrepareCompleted's
    write then makes for both: one fsync fewer on every prepare's path."""
    node.preparer().prepare(new_claim(node))
    assert synced_directories.count(node.checkpoint_path.parent) == 1
    assert [r.state for r in node.checkpoint().read().values()] == [ClaimState.PREPARE_COMPLETED]


def test_no_spec_appears_when_prepare_started_cannot_be_recorded(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    ref = new_claim(node)

    def disk_full(path: Path, data: bytes, mode: int, durable_name: bool = True) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module, "atomic_write", disk_full)
    with pytest.raises(OSError, match="disk full"):
        node.preparer().prepare(ref)
    assert list(node.specs.directory.iterdir()) == [], "neither the spec nor its temporary file"
    assert [p for p in node.metadata.directory.rglob("*") if p.is_file()] == [], "no metadata file either"
