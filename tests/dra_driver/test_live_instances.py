"""Plugin processes on one node see each other while alive and not once dead, even when killed;
a process of an older release, which holds no file, is seen while it serves its DRA socket."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import time
import uuid
from pathlib import Path

import pytest

from dra_driver.live_instances import LiveInstances
from tests.dra_driver.claims import plugin_instance as instance


def _live_until_killed(data_dir: Path, name: str) -> None:
    instance(data_dir, name).join()
    time.sleep(60)


def test_a_process_is_alive_until_it_leaves(tmp_path: Path) -> None:
    old, new = instance(tmp_path), instance(tmp_path)
    old.join()
    new.join()
    assert new.others() == [old.name] and old.others() == [new.name]
    old.leave()
    assert new.others() == []
    assert sorted(p.name for p in new.directory.iterdir()) == [new.name]


def test_a_killed_process_is_dead_and_its_file_is_removed(tmp_path: Path) -> None:
    me, killed = instance(tmp_path), str(uuid.uuid4())
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


def test_a_restarted_container_of_the_same_pod_joins_again_and_is_seen(tmp_path: Path) -> None:
    me, pod = instance(tmp_path), str(uuid.uuid4())
    me.join()
    crashed = instance(tmp_path, pod)
    crashed.join()
    os.close(crashed._held or -1)  # as a crash leaves it: the file stays, the lock goes with the fd
    crashed._held = None
    restarted = instance(tmp_path, pod)
    restarted.join()
    assert me.others() == [pod] and me.others() == [pod]


def test_a_file_left_by_a_crash_while_joining_is_removed(tmp_path: Path) -> None:
    me = instance(tmp_path)
    me.join()
    left = me.directory / f".{uuid.uuid4()}.joining"
    left.write_text("")
    assert me.others() == [] and not left.exists()


def test_an_older_release_is_alive_while_its_dra_socket_answers(tmp_path: Path) -> None:
    me = instance(tmp_path)
    me.join()
    path = tmp_path / "dra.sock"  # a plugin without per-pod sockets, and without an instance file
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen()
        assert me.others() == ["dra.sock"]
    assert path.exists() and me.others() == [], "a socket file a dead process left refuses connections"


def test_a_name_that_is_not_a_uid_never_becomes_a_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a UID"):
        LiveInstances(tmp_path, "../../etc/passwd", tmp_path / "dra.sock")
