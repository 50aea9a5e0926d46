"""The checkpoint detects corruption, keeps the bad file aside, and serialises writers."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from dra_driver.checkpoint import Checkpoint, ClaimRecord, ClaimState


def record(uid: str, state: ClaimState = ClaimState.PREPARE_COMPLETED) -> ClaimRecord:
    return ClaimRecord(uid, "ns", f"claim-{uid}", state, [{"device_name": "gpu-0"}], "kind: a/b\n")


def test_round_trip_with_boot_id(tmp_path: Path) -> None:
    checkpoint = Checkpoint(tmp_path / "checkpoint.json", "boot-1")
    checkpoint.update(lambda records: records.__setitem__("u1", record("u1")))
    document = json.loads((tmp_path / "checkpoint.json").read_text())
    assert document["payload"]["bootId"] == "boot-1" and document["version"] == 2 and len(document["checksum"]) == 64
    assert checkpoint.read() == {"u1": record("u1")}


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
