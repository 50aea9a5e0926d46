"""Crash-safe file replacement: temp file in the same directory, fsync, rename, fsync directory."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

TEMP_SUFFIX = ".tmp"


def temp_prefix(path: Path) -> str:
    """Temporary files for `path` start with this (a dot: hidden from globs such as `*.yaml`)."""
    return f".{path.name}."


@contextlib.contextmanager
def staged_write(path: Path, data: bytes, mode: int = 0o600) -> Iterator[Callable[[], None]]:
    """Make `data` durable under a temporary name next to `path`; the function yielded renames it
    to `path` (durable once the directory is fsynced). The slow fsync is done before the caller
    decides to publish, so it can overlap work that must finish before the file appears. A
    temporary file not published is removed."""
    fd, tmp_name = tempfile.mkstemp(prefix=temp_prefix(path), suffix=TEMP_SUFFIX, dir=path.parent)
    tmp = Path(tmp_name)
    published = False

    def publish() -> None:
        nonlocal published
        tmp.replace(path)
        published = True

    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        yield publish
    finally:
        if not published:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


def atomic_write(path: Path, data: bytes, mode: int = 0o600, durable_name: bool = True) -> None:
    """After a crash `path` holds either the old or the new content, never a mix. Without
    `durable_name` the directory is not fsynced: every process sees the new content at once (and
    after a crash of this one), but a power loss may bring back the old until the directory's next
    fsync."""
    with staged_write(path, data, mode) as publish:
        publish()
    if durable_name:
        fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_durably(path: Path) -> bool:
    """Delete `path` (missing is fine) and make the deletion durable; True if it existed."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_directory(path.parent)
    return True
