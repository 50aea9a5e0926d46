"""The state directory of `nativedra cluster up`: never delete what the harness did not make."""

from __future__ import annotations

from pathlib import Path

import pytest

from nativedra.cluster.controlplane import MARKER, ControlPlaneError, prepare_state_dir


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
