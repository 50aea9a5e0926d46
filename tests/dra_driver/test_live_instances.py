"""Plugin processes on one node see each other while alive and not once dead, even when killed."""

from __future__ import annotations

import multiprocessing
import signal
import time
import uuid
from pathlib import Path

import pytest

from dra_driver.live_instances import LiveInstances


def _live_until_killed(data_dir: Path, name: str) -> None:
    LiveInstances(data_dir, name).join()
    time.sleep(60)


def test_a_process_is_alive_until_it_leaves(tmp_path: Path) -> None:
    old, new = (LiveInstances(tmp_path, str(uuid.uuid4())) for _ in range(2))
    old.join()
    new.join()
    assert new.others() == [old.name] and old.others() == [new.name]
    old.leave()
    assert new.others() == []
    assert sorted(p.name for p in new.directory.iterdir()) == [new.name]


def test_a_killed_process_is_dead_and_its_file_is_removed(tmp_path: Path) -> None:
    me, killed = LiveInstances(tmp_path, str(uuid.uuid4())), str(uuid.uuid4())
    me.join()
    process = multiprocessing.get_context("spawn").Process(target=_live_until_killed, args=(tmp_path, killed))
    process.start()
    try:
        deadline = time.monotonic() + 30
        while me.others() != [killed]:
            assert time.monotonic() < deadline, "the other process never appeared alive"
            time.sleep(0.05)
    finally:
        process.kill()
        process.join(10)
    assert process.exitcode == -signal.SIGKILL
    assert me.others() == []
    assert not (me.directory / killed).exists(), "a dead process's file is removed"


def test_a_name_that_is_not_a_uid_never_becomes_a_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a UID"):
        LiveInstances(tmp_path, "../../etc/passwd")
