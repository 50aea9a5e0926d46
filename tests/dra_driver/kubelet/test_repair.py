"""Start-up repair on plain data: lost files come back, half-prepared claims are rolled back, lost
records are rebuilt from the files and the API, and a plugin killed at any step of prepare leaves a
state that a restart puts right."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from cdi.store import SpecStore
from dra_driver.errors import PrepareError
from dra_driver.kubelet import repair
from dra_driver.kubelet.checkpoint import ClaimRecord, ClaimState
from dra_driver.kubelet.claim import ClaimRef, ClaimSources, PreparedDevice
from dra_driver.kubelet.metadata_store import MetadataStore
from dra_driver.kubelet.prepare import ClaimPreparer, Reporters
from dra_driver.kubelet.repair import reconcile, repair_when_alone
from dra_driver.kubelet.stores import Stores
from dra_driver.live_instances import LiveInstances
from nativedra.base.kube.names import CDI_CLASS, CDI_KIND, CDI_VENDOR
from tests.dra_driver.claims import Node, claim, new_claim
from tests.dra_driver.claims import plugin_instance as instance


def test_reconcile_restores_the_lost_spec_of_a_prepared_claim(node: Node) -> None:
    ref = new_claim(node)
    node.preparer().prepare(ref)
    text = node.specs.path_for(ref.uid).read_text()
    node.specs.remove(ref.uid)  # e.g. /var/run/cdi is a tmpfs and the node rebooted
    done = reconcile(node.preparer())
    assert done == {"restored": [ref.uid], "rolled_back": [], "rebuilt": [], "orphans_removed": [], "deferred_for": []}
    assert node.specs.path_for(ref.uid).read_text() == text


def test_reconcile_rolls_back_a_half_prepared_claim_and_removes_orphans(node: Node) -> None:
    half, orphan = str(uuid.uuid4()), str(uuid.uuid4())
    text = f"cdiVersion: 0.3.0\nkind: {CDI_KIND}\ndevices: []\n"
    started = ClaimRecord(half, "ns", "half", ClaimState.PREPARE_STARTED, [], text)
    node.checkpoint().update(lambda records: records.__setitem__(half, started))  # the crash came after this
    node.specs.write_text(half, text)
    node.specs.write_text(orphan, text)
    done = reconcile(node.preparer())
    assert done == {
        "restored": [],
        "rolled_back": [half],
        "rebuilt": [],
        "orphans_removed": [orphan],
        "deferred_for": [],
    }
    assert node.specs.claim_uids() == set() and node.checkpoint().read() == {}


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

    done = reconcile(node.preparer())
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

    def api_down() -> list[dict[str, Any]]:
        raise PrepareError("api_error", "listing ResourceClaims failed: connection refused")

    done = reconcile(node.preparer(sources=ClaimSources(node.read_claim, api_down)))
    assert done["orphans_removed"] == [] and done["rebuilt"] == []
    assert node.specs.claim_uids() == set(answers)


def test_reconcile_removes_temporary_spec_files_left_by_a_crash_but_not_young_ones(node: Node) -> None:
    old, young = (node.specs.directory / f".{node.specs.path_for(str(uuid.uuid4())).name}.x.tmp" for _ in range(2))
    node.specs.directory.mkdir(parents=True)
    for path in (old, young):
        path.write_text("half a spec")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    reconcile(node.preparer())
    assert not old.exists() and young.exists(), "a young one may be another instance's write in flight"


class _StartsAnotherPlugin(MetadataStore):
    """The old plugin of a rolling update: as it stages a claim's files, the new one starts."""

    def __init__(self, node: Node, new_plugin: LiveInstances) -> None:
        super().__init__(node.metadata_dir)
        self.node, self.new_plugin = node, new_plugin
        self.repairs: list[dict[str, list[str]]] = []

    @contextlib.contextmanager
    def staged(self, claim_uid: str, files: Mapping[str, str]) -> Iterator[Callable[[], None]]:
        with super().staged(claim_uid, files) as publish:
            self.new_plugin.join()
            self.repairs.append(reconcile(self.node.preparer(), self.new_plugin.others))
            yield publish


def test_a_plugin_starting_beside_a_live_one_leaves_its_claim_in_flight_alone(node: Node) -> None:
    old, new = (instance(node.metadata_dir) for _ in range(2))
    old.join()
    ref = new_claim(node)
    metadata = _StartsAnotherPlugin(node, new)
    answer = node.preparer(stores=Stores(node.checkpoint(), node.specs, metadata)).prepare(ref)

    assert [r["deferred_for"] for r in metadata.repairs] == [[old.name]]
    assert metadata.repairs[0]["rolled_back"] == metadata.repairs[0]["orphans_removed"] == []
    assert node.failures == [] and len(answer) == 1
    assert node.checkpoint().read()[ref.uid].state is ClaimState.PREPARE_COMPLETED
    assert node.specs.claim_uids() == node.metadata.claim_uids() == {ref.uid}


def test_the_deferred_repair_runs_once_the_other_plugin_has_gone(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(repair, "RETRY_S", 0.05)
    old, new = (instance(node.metadata_dir) for _ in range(2))
    old.join()
    new.join()
    half = str(uuid.uuid4())  # the old plugin's claim, half prepared when it was stopped
    text = f"cdiVersion: 0.3.0\nkind: {CDI_KIND}\ndevices: []\n"
    started = ClaimRecord(half, "ns", "half", ClaimState.PREPARE_STARTED, [], text)
    node.checkpoint().update(lambda records: records.__setitem__(half, started))
    node.specs.write_text(half, text)
    preparer = node.preparer()
    assert reconcile(preparer, new.others)["deferred_for"] == [old.name]
    assert set(node.checkpoint().read()) == {half}

    stop = threading.Event()
    repairing = threading.Thread(target=repair_when_alone, args=(preparer, new.others, stop))
    repairing.start()
    time.sleep(0.2)
    assert repairing.is_alive() and set(node.checkpoint().read()) == {half}, "no repair while the old one lives"
    old.leave()
    repairing.join(10)
    stop.set()
    assert not repairing.is_alive()
    assert node.checkpoint().read() == {} and node.specs.claim_uids() == set()


class _HeldWhileStaged(MetadataStore):
    """Holds a prepare with its files staged (PrepareStarted submitted) until `release` is set."""

    def __init__(self, node: Node) -> None:
        super().__init__(node.metadata_dir)
        self.staging, self.release = threading.Event(), threading.Event()

    @contextlib.contextmanager
    def staged(self, claim_uid: str, files: Mapping[str, str]) -> Iterator[Callable[[], None]]:
        with super().staged(claim_uid, files) as publish:
            self.staging.set()
            self.release.wait(10)
            yield publish


def test_the_deferred_repair_leaves_this_process_s_claim_in_flight_alone(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(repair, "RETRY_S", 0.05)
    old, new = (instance(node.metadata_dir) for _ in range(2))
    old.join()
    new.join()
    metadata = _HeldWhileStaged(node)
    preparer = node.preparer(stores=Stores(node.checkpoint(), node.specs, metadata))
    ref = new_claim(node)
    answers: list[list[PreparedDevice]] = []
    preparing = threading.Thread(target=lambda: answers.append(preparer.prepare(ref)))
    preparing.start()
    assert metadata.staging.wait(10)
    old.leave()
    stop = threading.Event()
    repairing = threading.Thread(target=repair_when_alone, args=(preparer, new.others, stop))
    repairing.start()
    time.sleep(0.3)
    assert repairing.is_alive(), "the repair waits for the claim in flight"
    metadata.release.set()
    preparing.join(10)
    repairing.join(10)
    stop.set()
    assert not repairing.is_alive() and node.failures == [] and len(answers) == 1
    assert node.checkpoint().read()[ref.uid].state is ClaimState.PREPARE_COMPLETED
    assert node.specs.claim_uids() == node.metadata.claim_uids() == {ref.uid}


def test_the_deferred_repair_tries_again_after_a_failure(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(repair, "RETRY_S", 0.05)
    orphan = str(uuid.uuid4())
    node.specs.write_text(orphan, f"cdiVersion: 0.3.0\nkind: {CDI_KIND}\ndevices: []\n")
    failures: list[OSError] = []

    def others() -> list[str]:
        if not failures:
            failures.append(OSError("the instances directory is not readable"))
            raise failures[0]
        return []

    stop = threading.Event()
    repairing = threading.Thread(target=repair_when_alone, args=(node.preparer(), others, stop))
    repairing.start()
    repairing.join(10)
    stop.set()
    assert not repairing.is_alive() and len(failures) == 1
    assert node.specs.claim_uids() == set()


# A plugin killed (SIGKILL: the OOM killer, a node crash) between two steps of prepare, by a store
# or a reporter that kills its process there: PrepareStarted recorded, files not yet published;
# the spec published, PrepareCompleted not yet recorded; everything durable, the answer not yet given.
CRASH_STEPS = ["after-prepare-started", "after-spec-written", "after-prepare-completed"]


def _die(*_: object) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class _DyingSpecs(SpecStore):
    """Kills its process once the claim's spec (and its metadata files) are published."""

    @contextlib.contextmanager
    def staged(self, claim_uid: str, text: str) -> Iterator[Callable[[], None]]:
        with super().staged(claim_uid, text) as publish:
            yield publish
        _die()


class _DyingMetadata(MetadataStore):
    """Kills its process where it would publish the claim's metadata files."""

    @contextlib.contextmanager
    def staged(self, claim_uid: str, files: Mapping[str, str]) -> Iterator[Callable[[], None]]:
        with super().staged(claim_uid, files):
            yield _die


def _dying_preparer(node: Node, step: str) -> ClaimPreparer:
    if step == "after-prepare-started":
        return node.preparer(stores=Stores(node.checkpoint(), node.specs, _DyingMetadata(node.metadata_dir)))
    if step == "after-spec-written":
        specs = _DyingSpecs(node.specs.directory, CDI_VENDOR, CDI_CLASS)
        return node.preparer(stores=Stores(node.checkpoint(), specs, node.metadata))
    return node.preparer(reporters=Reporters(on_failure=_die, on_prepared=_die))


def _prepare_until_killed(root: Path, claim: dict[str, Any], step: str) -> None:
    """A plugin process on the node in `root` that prepares `claim` and is killed at `step`."""
    node = Node(root)
    node.claims[claim["metadata"]["name"]] = claim
    ref = ClaimRef(claim["metadata"]["namespace"], claim["metadata"]["uid"], claim["metadata"]["name"])
    _dying_preparer(node, step).prepare(ref)


@pytest.mark.parametrize("step", CRASH_STEPS)
def test_a_plugin_killed_at_each_step_of_prepare_is_put_right_by_a_restart(node: Node, step: str) -> None:
    ref = new_claim(node)
    plugin = multiprocessing.get_context("spawn").Process(
        target=_prepare_until_killed, args=(node.root, node.claims[ref.name], step)
    )
    plugin.start()
    plugin.join(timeout=60)
    assert plugin.exitcode == -signal.SIGKILL, f"the plugin was to be killed {step}, exit code {plugin.exitcode}"
    completed = step == "after-prepare-completed"
    assert [r.state for r in node.checkpoint().read().values()] == [
        ClaimState.PREPARE_COMPLETED if completed else ClaimState.PREPARE_STARTED
    ]
    assert node.specs.claim_uids() == (set() if step == "after-prepare-started" else {ref.uid})

    restarted = node.preparer()
    done = reconcile(restarted)
    assert done["rolled_back"] == ([] if completed else [ref.uid]) and done["rebuilt"] == []
    if completed:
        del node.claims[ref.name]  # the record answers: the claim is not read again
    answer = restarted.prepare(ref)
    assert [(d.device_name, len(d.cdi_device_ids)) for d in answer] == [("gpu-0-1of2-0", 2)]
    record = node.checkpoint().read()[ref.uid]
    assert record.state is ClaimState.PREPARE_COMPLETED and record.cdi_spec == node.specs.read_text(ref.uid)
    assert node.specs.claim_uids() == {ref.uid} and node.metadata.claim_uids() == {ref.uid}
    restarted.unprepare(ref)
    assert node.specs.claim_uids() == set() and node.metadata.claim_uids() == set()
    assert node.checkpoint().read() == {}
