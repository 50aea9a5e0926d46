"""Which plugin processes on this node are alive, so that the start-up repair never undoes another
process's work.

During a rolling update the old pod still prepares claims while the new one starts. The repair
rolls back half-done claims and deletes files that have no record, so run beside a live process
it deleted the metadata directory of a claim that process was preparing (one FailedPrepare event,
`No such file or directory`, seen in CI). Each process holds an exclusive flock on its own file in
`<data dir>/plugin-instances/` for its whole life; the kernel drops the lock when the process dies,
even by SIGKILL, so a file nobody holds is a dead process's and is removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from cdi.store import is_kubernetes_uid

SUBDIR = "plugin-instances"
FILE_MODE = 0o600


class LiveInstances:
    """This process's place among the plugin processes of the node."""

    def __init__(self, data_dir: Path, name: str) -> None:
        if not is_kubernetes_uid(name):
            raise ValueError(f"plugin instance name {name!r} is not a UID")  # it becomes a file name
        self.directory = data_dir / SUBDIR
        self.name = name
        self._held: int | None = None

    def join(self) -> None:
        """Hold our file's lock from now on. The file appears under its name already locked
        (locked under a hidden name, then renamed), so no one ever sees it unlocked and removes it."""
        self.directory.mkdir(parents=True, exist_ok=True)
        hidden = self.directory / f".{self.name}.joining"
        fd = os.open(hidden, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            hidden.rename(self.directory / self.name)
        except OSError:
            os.close(fd)
            raise
        self._held = fd

    def leave(self) -> None:
        """Remove our file, then let go of it (a clean exit; a crash leaves it unlocked instead)."""
        if self._held is None:
            return
        with contextlib.suppress(FileNotFoundError):
            (self.directory / self.name).unlink()
        os.close(self._held)
        self._held = None

    def others(self) -> list[str]:
        """The other processes alive now; the files of dead ones are removed on the way."""
        if not self.directory.is_dir():
            return []
        alive = []
        for path in sorted(self.directory.iterdir()):
            if path.name == self.name or not is_kubernetes_uid(path.name):
                continue  # ours, or a hidden file of a process still joining (it holds no claim work yet)
            if _held_by_someone(path):
                alive.append(path.name)
        return alive


def _held_by_someone(path: Path) -> bool:
    """Whether a live process holds `path`'s lock; removes the file when none does."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False  # removed by another process that found it dead
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return False
    finally:
        os.close(fd)
