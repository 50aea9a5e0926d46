"""ClaimPreparer against plain data: claims are dicts handed over by a plain function, devices
come from the real slice builder, files go to a temporary CDI directory and checkpoint."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from dra_driver import checkpoint as checkpoint_module
from dra_driver.checkpoint import ClaimRecord, ClaimState
from dra_driver.errors import PrepareError
from dra_driver.prepare import ClaimRef, PreparedDevice, api_claim_reader
from dra_driver.publish_config import PublishConfig
from dra_driver.slices import devices_and_counters
from tests.dra_driver.claims import INVENTORY, NODE, Node, claim, new_claim


def test_prepare_writes_the_spec_and_a_completed_record(node: Node) -> None:
    ref = new_claim(node)
    answer = node.preparer().prepare(ref)
    cdi_ids = [
        f"k8s.gpu.nativedra.dev/claim={ref.uid}-gpu-0-1of2-0",
        f"k8s.gpu.nativedra.dev/claim={ref.uid}_metadata_gpus",
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


def test_reconcile_restores_the_lost_spec_of_a_prepared_claim(node: Node) -> None:
    ref = new_claim(node)
    node.preparer().prepare(ref)
    text = node.specs.path_for(ref.uid).read_text()
    node.specs.remove(ref.uid)  # e.g. /var/run/cdi is a tmpfs and the node rebooted
    done = node.preparer().reconcile()
    assert done == {"restored": [ref.uid], "rolled_back": [], "rebuilt": [], "orphans_removed": []}
    assert node.specs.path_for(ref.uid).read_text() == text


def test_reconcile_rolls_back_a_half_prepared_claim_and_removes_orphans(node: Node) -> None:
    half, orphan = str(uuid.uuid4()), str(uuid.uuid4())
    text = "cdiVersion: 0.3.0\nkind: k8s.gpu.nativedra.dev/claim\ndevices: []\n"
    started = ClaimRecord(half, "ns", "half", ClaimState.PREPARE_STARTED, [], text)
    node.checkpoint().update(lambda records: records.__setitem__(half, started))  # the crash came after this
    node.specs.write_text(half, text)
    node.specs.write_text(orphan, text)
    done = node.preparer().reconcile()
    assert done == {"restored": [], "rolled_back": [half], "rebuilt": [], "orphans_removed": [orphan]}
    assert node.specs.claim_uids() == set() and node.checkpoint().read() == {}


@contextlib.contextmanager
def silent_api_server() -> Iterator[str]:
    """A TCP listener that accepts connections and never answers: an API server that hangs."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):  # the listener is closed at the end
            while len(held) < 16:
                held.append(listener.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        for connection in held:
            connection.close()


def test_a_claim_read_from_an_api_server_that_never_answers_ends_within_the_bound() -> None:
    with silent_api_server() as url:
        configuration = client.Configuration()
        configuration.host = url
        read = api_claim_reader(client.ApiClient(configuration), timeout_s=1)
        ref = ClaimRef("ns", str(uuid.uuid4()), "train")
        outcome: list[BaseException | dict[str, Any]] = []
        worker = threading.Thread(target=lambda: outcome.append(_outcome(read, ref)), daemon=True)
        started = time.monotonic()
        worker.start()
        worker.join(timeout=10)
        elapsed = time.monotonic() - started
    assert outcome, "the read was still waiting for the API server after 10 s"
    [error] = outcome
    assert isinstance(error, PrepareError) and error.reason == "api_error"
    assert f"claim ns/train ({ref.uid})" in str(error) and "within 1 s" in str(error)
    assert elapsed < 3, f"one attempt of 1 s, no retries: took {elapsed:.1f} s"


def _outcome(read: Callable[[ClaimRef], dict[str, Any]], ref: ClaimRef) -> BaseException | dict[str, Any]:
    try:
        return read(ref)
    except PrepareError as error:
        return error


def _prepared_claims(node: Node, count: int) -> dict[str, list[PreparedDevice]]:
    answers = {}
    for i in range(count):
        uid = str(uuid.uuid4())
        node.claims[f"train-{i}"] = claim(uid, devices=(f"gpu-{i}",))
        node.claims[f"train-{i}"]["metadata"]["name"] = f"train-{i}"
        answers[uid] = node.preparer().prepare(ClaimRef("ns", uid, f"train-{i}"))
    return answers


def test_reconcile_after_a_corrupted_checkpoint_rebuilds_the_records_and_keeps_every_spec_in_use(node: Node) -> None:
    answers = _prepared_claims(node, 6)
    texts = {uid: node.specs.read_text(uid) for uid in answers}
    orphan, elsewhere = str(uuid.uuid4()), str(uuid.uuid4())
    node.claims["moved"] = claim(elsewhere, pool="node-b")  # allocated to another node since
    for uid in (orphan, elsewhere):
        node.specs.write_text(uid, next(iter(texts.values())))
    node.checkpoint_path.write_text(node.checkpoint_path.read_text().replace("PrepareCompleted", "PrepareCompleteX"))

    done = node.preparer().reconcile()
    assert sorted(done["rebuilt"]) == sorted(answers) and sorted(done["orphans_removed"]) == sorted([orphan, elsewhere])
    assert {uid: node.specs.read_text(uid) for uid in answers} == texts
    records = node.checkpoint().read()
    assert set(records) == set(answers) and all(r.state is ClaimState.PREPARE_COMPLETED for r in records.values())
    assert {uid: records[uid].cdi_spec for uid in answers} == texts
    node.claims.clear()  # the rebuilt record answers without reading the claim again
    preparer = node.preparer()
    for uid, answer in answers.items():
        assert preparer.prepare(ClaimRef("ns", uid, records[uid].name)) == answer


def test_reconcile_deletes_no_spec_without_a_record_while_the_api_cannot_say_whose_it_is(node: Node) -> None:
    answers = _prepared_claims(node, 2)
    node.checkpoint_path.write_bytes(bytes(range(256)) * 8)
    preparer = node.preparer()

    def api_down() -> list[dict[str, Any]]:
        raise PrepareError("api_error", "listing ResourceClaims failed: connection refused")

    preparer.list_claims = api_down
    done = preparer.reconcile()
    assert done["orphans_removed"] == [] and done["rebuilt"] == []
    assert node.specs.claim_uids() == set(answers)


def test_a_failure_after_the_claim_was_read_names_the_pods_it_is_reserved_for(node: Node) -> None:
    ref = new_claim(node, pool="node-b")
    pod = {"resource": "pods", "name": "trainer-0", "uid": str(uuid.uuid4())}
    node.claims["train"]["status"]["reservedFor"] = [pod]
    with pytest.raises(PrepareError):
        node.preparer().prepare(ref)
    [(failed, error)] = node.failures
    assert failed == ref and error.reason == "not_ours" and error.reserved_for == [pod]


def test_no_spec_appears_when_prepare_started_cannot_be_recorded(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    ref = new_claim(node)

    def disk_full(path: Path, data: bytes, mode: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module, "atomic_write", disk_full)
    with pytest.raises(OSError, match="disk full"):
        node.preparer().prepare(ref)
    assert list(node.specs.directory.iterdir()) == [], "neither the spec nor its temporary file"
    assert [p for p in node.metadata.directory.rglob("*") if p.is_file()] == [], "no metadata file either"


def test_reconcile_removes_temporary_spec_files_left_by_a_crash_but_not_young_ones(node: Node) -> None:
    old, young = (node.specs.directory / f".{node.specs.path_for(str(uuid.uuid4())).name}.x.tmp" for _ in range(2))
    node.specs.directory.mkdir(parents=True)
    for path in (old, young):
        path.write_text("half a spec")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    node.preparer().reconcile()
    assert not old.exists() and young.exists(), "a young one may be another instance's write in flight"


BOTH_MODES = {d.name: d for d in devices_and_counters(INVENTORY, PublishConfig(mig_or_fractions=True))[0]}


def test_a_gpu_offering_both_modes_takes_the_mode_of_its_first_claim(node: Node) -> None:
    """MIG placements and fractions of one GPU (compatibility groups): the first claim prepared on
    it sets its mode, a claim needing the other mode is refused while that one holds it, and may
    prepare once it is gone; another GPU is free to take either mode."""
    preparer = node.preparer(published=BOTH_MODES)
    mig = new_claim(node, "mig", devices=("gpu-0-1g-10gb-0",))
    preparer.prepare(mig)
    fraction = new_claim(node, "fraction", devices=("gpu-0-1of2-0",))
    with pytest.raises(PrepareError) as refused:
        preparer.prepare(fraction)
    assert refused.value.reason == "mode_conflict"
    assert "GPU 0 in whole-GPU mode, but claim ns/mig holds it in MIG mode" in str(refused.value)
    assert fraction.uid not in node.checkpoint().read(), "a refused claim leaves no record"
    elsewhere = new_claim(node, "elsewhere", devices=("gpu-1-1of2-0",))
    preparer.prepare(elsewhere)
    preparer.unprepare(mig)
    assert [d.device_name for d in preparer.prepare(fraction)] == ["gpu-0-1of2-0"]


def test_one_claim_cannot_put_a_gpu_in_both_modes(node: Node) -> None:
    preparer = node.preparer(published=BOTH_MODES)
    both = new_claim(node, devices=("gpu-0-1of2-0", "gpu-0-1g-10gb-0"))
    with pytest.raises(PrepareError, match="needs GPU 0 in MIG mode, but claim ns/train holds it in whole-GPU mode"):
        preparer.prepare(both)
