"""The checkpoint detects corruption, keeps the bad file aside, serialises writers, and writes the
changes of concurrent callers as one durable batch."""

from __future__ import annotations

import hashlib
import itertools
import json
import multiprocessing
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dra_driver.kubelet import checkpoint as checkpoint_module
from dra_driver.kubelet.checkpoint import Checkpoint, ClaimRecord, ClaimState
from nativedra.base.fsutil.atomic import atomic_write


def record(uid: str, state: ClaimState = ClaimState.PREPARE_COMPLETED) -> ClaimRecord:
    return ClaimRecord(uid, "ns", f"claim-{uid}", state, [{"device_name": "gpu-0"}], "kind: a/b\n")


def test_round_trip_with_boot_id(tmp_path: Path) -> None:
    checkpoint = Checkpoint(tmp_path / "checkpoint.json", "boot-1")
    checkpoint.update(lambda records: records.__setitem__("u1", record("u1")))
    document = json.loads((tmp_path / "checkpoint.json").read_text())
    assert document["payload"]["bootId"] == "boot-1" and document["version"] == 2 and len(document["checksum"]) == 64
    assert checkpoint.read() == {"u1": record("u1")}


def test_the_file_is_the_canonical_payload_across_changes(tmp_path: Path) -> None:
    """Records' texts are cached between writes: the file must stay exactly what a fresh
    serialisation gives (the checksum is verified against that on read), whatever changed."""
    path = tmp_path / "checkpoint.json"
    checkpoint = Checkpoint(path, "boot-\u00e9")
    changes: list[Callable[[dict[str, ClaimRecord]], object]] = [
        lambda records: records.update({uid: record(uid) for uid in ("u2", "u1", "\u00fc3")}),
        lambda records: records.__setitem__("u1", record("u1", ClaimState.PREPARE_STARTED)),
        lambda records: records.pop("u2"),
        lambda records: records.__setitem__("u0", record("u0")),
    ]
    for change in changes:
        checkpoint.update(change)
        document = json.loads(path.read_text())
        payload = document["payload"]
        expected = {"bootId": "boot-\u00e9", "claims": {uid: r.to_json() for uid, r in checkpoint.read().items()}}
        assert payload == expected
        canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        assert document["checksum"] == hashlib.sha256(canonical.encode()).hexdigest()
        assert Checkpoint(path, "boot-\u00e9").read() == checkpoint.read()  # a fresh reader accepts it


def test_corruption_is_detected_and_the_file_kept_aside(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    checkpoint = Checkpoint(path, "boot-1")
    checkpoint.update(lambda records: records.__setitem__("u1", record("u1")))
    path.write_text(path.read_text().replace("claim-u1", "claim-u2"))
    assert checkpoint.read() == {}
    assert checkpoint.last_error and "checksum mismatch" in checkpoint.last_error
    [aside] = list(tmp_path.glob("checkpoint.json.corrupt-*"))
    assert "claim-u2" in aside.read_text()
    assert not path.exists()
    checkpoint.update(lambda records: records.__setitem__("u3", record("u3")))
    assert set(checkpoint.read()) == {"u3"}


def test_truncated_file_is_corruption_too(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text('{"version": 2, "payload": {')
    checkpoint = Checkpoint(path, "boot-1")
    assert checkpoint.read() == {}
    assert checkpoint.last_error is not None


def _checksummed(payload: Any) -> bytes:
    """A document whose checksum is right but whose payload has the wrong shape."""
    body = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return json.dumps(
        {"version": 2, "checksum": hashlib.sha256(body.encode()).hexdigest(), "payload": payload}
    ).encode()


@pytest.mark.parametrize(
    "content",
    [
        bytes(range(256)) * 8,  # 2 KB that is not even UTF-8
        b"[]",
        b"null",
        _checksummed([]),
        _checksummed({"claims": []}),
        _checksummed({"claims": {"u1": ["not", "a", "record"]}}),
        _checksummed({"claims": {"u1": {**record("u1").to_json(), "state": "Bogus"}}}),
    ],
)
def test_any_unparseable_file_is_corruption_kept_aside(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_bytes(content)
    checkpoint = Checkpoint(path, "boot-1")
    assert checkpoint.read() == {}
    assert checkpoint.last_error and "is corrupted" in checkpoint.last_error
    [aside] = list(tmp_path.glob("checkpoint.json.corrupt-*"))
    assert aside.read_bytes() == content
    checkpoint.update(lambda records: records.__setitem__("u1", record("u1")))
    assert set(checkpoint.read()) == {"u1"}


def _add_many(path: str, prefix: str) -> None:
    checkpoint = Checkpoint(Path(path), "boot-1")
    for i in range(40):
        checkpoint.update(lambda records, i=i: records.__setitem__(f"{prefix}{i}", record(f"{prefix}{i}")))  # type: ignore[misc]


def test_two_processes_updating_at_once_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "checkpoint.json")
    writers = [multiprocessing.Process(target=_add_many, args=(path, prefix)) for prefix in ("a", "b")]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
    assert len(Checkpoint(Path(path), "boot-1").read()) == 80


def adding(uid: str) -> Callable[[dict[str, ClaimRecord]], None]:
    """The change that records claim `uid`."""

    def add(records: dict[str, ClaimRecord]) -> None:
        records[uid] = record(uid)

    return add


def _durable_uids(path: Path) -> set[str]:
    """The claims in the file, after checking it is a whole document with the right checksum."""
    document = json.loads(path.read_text())
    body = json.dumps(document["payload"], sort_keys=True, separators=(",", ":"))
    assert document["checksum"] == hashlib.sha256(body.encode()).hexdigest()
    return set(document["payload"]["claims"])


class Gate:
    """Replaces the checkpoint's atomic_write: each write waits until the test opens the gate, and
    fails while `failure` is set. Lets a test queue changes behind a write in flight."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = threading.Event()  # a write is in flight, holding its batch
        self.open = threading.Event()
        self.failure: OSError | None = None
        self.writes = 0
        monkeypatch.setattr(checkpoint_module, "atomic_write", self.write)

    def write(self, path: Path, data: bytes, mode: int, durable_name: bool = True) -> None:
        self.entered.set()
        assert self.open.wait(10), "the test never opened the gate"
        self.writes += 1
        if self.failure:
            raise self.failure
        atomic_write(path, data, mode, durable_name)


def test_concurrent_updates_are_each_durable_when_they_return_and_every_batch_is_a_whole_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "checkpoint.json"
    checkpoint = Checkpoint(path, "boot-1")
    after_each_write: list[set[str]] = []

    def checked_write(target: Path, data: bytes, mode: int, durable_name: bool = True) -> None:
        atomic_write(target, data, mode, durable_name)
        after_each_write.append(_durable_uids(target))

    monkeypatch.setattr(checkpoint_module, "atomic_write", checked_write)
    missing: list[str] = []

    def add(thread: int) -> None:
        for i in range(10):
            uid = f"t{thread}-{i}"
            checkpoint.update(adding(uid))
            if uid not in _durable_uids(path):
                missing.append(uid)

    threads = [threading.Thread(target=add, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert missing == [], "an update returned before the write holding it was durable"
    assert len(_durable_uids(path)) == 80 and len(checkpoint.read()) == 80
    assert all(earlier <= later for earlier, later in itertools.pairwise(after_each_write)), "nothing lost"


def test_concurrent_updates_share_fsyncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checkpoint = Checkpoint(tmp_path / "checkpoint.json", "boot-1")
    fsyncs = itertools.count()
    real_fsync = os.fsync

    def counted_fsync(fd: int) -> None:
        next(fsyncs)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counted_fsync)
    start = threading.Barrier(8)

    def add(thread: int) -> None:
        start.wait()
        for i in range(10):
            uid = f"t{thread}-{i}"
            checkpoint.update(adding(uid))

    threads = [threading.Thread(target=add, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(checkpoint.read()) == 80
    assert next(fsyncs) < 80, "one write (file and directory fsync) per batch, not per update"


def test_a_failed_batch_write_fails_every_caller_in_it_and_keeps_the_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "checkpoint.json"
    checkpoint = Checkpoint(path, "boot-1")
    checkpoint.update(adding("u0"))
    before = path.read_bytes()
    gate = Gate(monkeypatch)
    in_flight = checkpoint.submit(adding("first"))
    assert gate.entered.wait(10)
    queued = [checkpoint.submit(adding(f"q{i}")) for i in range(5)]
    gate.failure = OSError("disk full")
    gate.open.set()
    for future in [in_flight, *queued]:
        with pytest.raises(OSError, match="disk full"):
            future.result(10)
    assert gate.writes == 2, "the queued changes were written as one batch"
    assert path.read_bytes() == before and checkpoint.read() == {"u0": record("u0")}
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    gate.failure = None
    checkpoint.update(adding("u1"))
    assert _durable_uids(path) == {"u0", "u1"}


def test_a_failing_change_fails_its_caller_only_and_leaves_no_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint = Checkpoint(tmp_path / "checkpoint.json", "boot-1")
    gate = Gate(monkeypatch)
    blocker = checkpoint.submit(adding("u0"))

    def half_done(records: dict[str, ClaimRecord]) -> None:
        records["half"] = record("half")
        raise KeyError("missing")

    good = checkpoint.submit(adding("u1"))
    bad = checkpoint.submit(half_done)
    later = checkpoint.submit(len)
    gate.open.set()
    blocker.result(10)
    good.result(10)
    with pytest.raises(KeyError, match="missing"):
        bad.result(10)
    assert later.result(10) == 2
    assert set(checkpoint.read()) == {"u0", "u1"} == _durable_uids(tmp_path / "checkpoint.json")


def test_a_read_does_not_wait_for_a_write_in_flight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checkpoint = Checkpoint(tmp_path / "checkpoint.json", "boot-1")
    checkpoint.update(adding("u0"))
    gate = Gate(monkeypatch)
    in_flight = checkpoint.submit(adding("u1"))
    assert checkpoint.read() == {"u0": record("u0")}, "the last durable state, at once"
    gate.open.set()
    in_flight.result(10)
    assert set(checkpoint.read()) == {"u0", "u1"}


def test_callers_wait_while_the_queue_is_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checkpoint = Checkpoint(tmp_path / "checkpoint.json", "boot-1", max_pending=2)
    gate = Gate(monkeypatch)
    futures = [checkpoint.submit(adding("u0"))]
    assert gate.entered.wait(10)
    futures += [checkpoint.submit(adding(f"u{i}")) for i in (1, 2)]
    fourth = threading.Thread(target=checkpoint.update, args=(adding("u3"),))
    fourth.start()
    fourth.join(0.3)
    assert fourth.is_alive(), "a fourth change waits while two are queued behind the write in flight"
    gate.open.set()
    fourth.join(10)
    assert not fourth.is_alive() and all(future.result(10) is None for future in futures)
    assert set(checkpoint.read()) == {"u0", "u1", "u2", "u3"}


def test_only_a_durable_change_waits_for_the_directory_fsync(tmp_path: Path, synced_directories: list[Path]) -> None:
    """A change submitted as not durable is in the file every process reads when it returns (a
    crash of this process keeps it); its directory entry is made durable by the next durable write."""
    checkpoint = Checkpoint(tmp_path / "checkpoint.json", "boot-1")
    checkpoint.submit(adding("u0"), durable=False).result(10)
    assert synced_directories == [] and _durable_uids(tmp_path / "checkpoint.json") == {"u0"}
    assert set(Checkpoint(tmp_path / "checkpoint.json", "boot-1").read()) == {"u0"}, "another reader sees it"
    checkpoint.update(adding("u1"))
    assert synced_directories == [tmp_path] and _durable_uids(tmp_path / "checkpoint.json") == {"u0", "u1"}
