"""Atomic writes never leave a half-written file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nativedra.base.fsutil import atomic


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "file"
    atomic.atomic_write(target, b"old")

    def broken_fsync(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        atomic.atomic_write(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_a_staged_file_appears_only_when_published_and_is_removed_otherwise(tmp_path: Path) -> None:
    target = tmp_path / "file"
    with atomic.staged_write(target, b"new") as publish:
        [staged] = list(tmp_path.iterdir())
        assert staged.name.startswith(atomic.temp_prefix(target)) and staged.read_bytes() == b"new"
        assert not target.exists()
        publish()
    assert [p.name for p in tmp_path.iterdir()] == ["file"] and target.read_bytes() == b"new"
    with pytest.raises(RuntimeError), atomic.staged_write(target, b"newer"):
        raise RuntimeError("the record it waited for was not written")
    assert [p.name for p in tmp_path.iterdir()] == ["file"] and target.read_bytes() == b"new"
