"""The state directory of `nativedra cluster up`: never delete what the harness did not make."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from nativedra.cluster.controlplane import (
    MARKER,
    ControlPlaneError,
    _ephemeral_ports,
    free_port,
    prepare_state_dir,
)


def test_a_foreign_non_empty_directory_is_refused_and_left_intact(tmp_path: Path) -> None:
    precious = tmp_path / "home" / "notes.txt"
    precious.parent.mkdir()
    precious.write_text("keep me")
    with pytest.raises(ControlPlaneError, match="not empty and was not made by nativedra"):
        prepare_state_dir(precious.parent)
    assert precious.read_text() == "keep me"


def test_a_new_or_empty_directory_is_used_and_marked(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    prepare_state_dir(empty)
    prepare_state_dir(tmp_path / "new" / "dir")
    assert (empty / MARKER).is_file() and (empty / "logs").is_dir()
    assert (tmp_path / "new" / "dir" / MARKER).is_file()


def test_its_own_directory_from_a_stopped_cluster_is_emptied_and_reused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    prepare_state_dir(state)
    (state / "logs" / "old.log").write_text("previous run")
    prepare_state_dir(state)
    assert not (state / "logs" / "old.log").exists()


def test_a_running_cluster_is_never_replaced(tmp_path: Path) -> None:
    state = tmp_path / "state"
    prepare_state_dir(state)
    (state / "state.json").write_text("{}")
    with pytest.raises(ControlPlaneError, match="already recorded"):
        prepare_state_dir(state)
    assert (state / "state.json").exists()


def test_free_ports_are_outside_the_ephemeral_range_and_never_handed_out_twice() -> None:
    """Outgoing connections take ephemeral ports: one picked from there could be taken before its
    component binds it; and a port handed out may not be bound yet when the next is picked."""
    ephemeral = _ephemeral_ports()
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert [port for port in ports if port in ephemeral] == []
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", ports[-1]))  # free indeed
