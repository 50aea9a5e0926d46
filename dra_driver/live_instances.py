"""Which plugin processes on this node are alive, so that the start-up repair never undoes another
process's work.

During a rolling update the old pod still prepares claims while the new one starts. The repair
rolls back half-done claims and deletes files that have no record, so run beside a live process
it deleted the metadata directory of a claim that process was preparing (one FailedPrepare event,
`No such file or directory`, seen in CI). Each process holds an exclusive flock on its own file in
`<data dir>/plugin-instances/` for its whole life; the kernel drops the lock when the process dies,
even by SIGKILL, so a file nobody holds is a dead process's and is removed. Joining and removing
happen under a flock on the directory, so a file is never removed as it is being (re)created.
A process of a release before these files is seen by its DRA socket in the data directory instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from cdi.store import is_kubernetes_uid

SUBDIR = "plugin-instances"
FILE_MODE = 0o600
JOINING_SUFFIX = ".joining"
DRA_SOCKETS = "dra*.sock"  # dra.sock, or dra-<pod UID>.sock per pod (kubelet_paths.dra_socket)


class LiveInstances:
    """This process's place among the plugin processes of the node; `own_socket` is the DRA socket
    this process serves (or will)."""

    def __init__(self, data_dir: Path, name: str, own_socket: Path) -> None:
        if not is_kubernetes_uid(name):
            raise ValueError(f"plugin instance name {name!r} is not a UID")  # it becomes a file name
        self.data_dir = data_dir
        self.directory = data_dir / SUBDIR
        self.name = name
        self.own_socket = own_socket
        self._held: int | None = None

    def join(self) -> None:
        """Hold our file's lock from now on. The file appears under its name already locked
        (locked under a hidden name, then renamed), so no one ever sees it unlocked."""
        self.directory.mkdir(parents=True, exist_ok=True)
        hidden = self.directory / f".{self.name}{JOINING_SUFFIX}"
        with self._directory_locked():
            fd = os.open(hidden, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_MODE)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                hidden.rename(self.directory / self.name)
            except OSError:
                os.close(fd)
                hidden.unlink(missing_ok=True)
                raise
        self._held = fd

    def leave(self) -> None:
        """Remove our file, then let go of it (a clean exit; a crash leaves it unlocked instead)."""
        if self._held is None:
            return
        with self._directory_locked():
            (self.directory / self.name).unlink(missing_ok=True)
        os.close(self._held)
        self._held = None

    def others(self) -> list[str]:
        """The other processes alive now: those holding their file (the files of dead ones, and
        hidden ones a crash left while joining, are removed on the way), and those of an older
        release answering on their DRA socket."""
        alive = []
        if self.directory.is_dir():
            with self._directory_locked():
                for path in sorted(self.directory.iterdir()):
                    if path.name.endswith(JOINING_SUFFIX):
                        path.unlink(missing_ok=True)  # no one joins while we hold the directory
                    elif _another_process(path, self.name) and _held_by_someone(path):
                        alive.append(path.name)
        serving = [path.name for path in sorted(self.data_dir.glob(DRA_SOCKETS)) if path != self.own_socket]
        return alive + [name for name in serving if answers(self.data_dir / name)]

    @contextlib.contextmanager
    def _directory_locked(self) -> Iterator[None]:
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def _another_process(path: Path, own_name: str) -> bool:
    return path.name != own_name and is_kubernetes_uid(path.name) and path.is_file()


def _held_by_someone(path: Path) -> bool:
    """Whether a live process holds `path`'s lock (call with the directory locked); removes the
    file when none does."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:  # gone, or not a file we made (a link, say): no process of ours
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        path.unlink(missing_ok=True)
        return False
    finally:
        os.close(fd)


def answers(path: Path, timeout_s: float = 1.0) -> bool:
    """Whether a process accepts connections on the unix socket at `path`: a socket file a crashed
    process left behind refuses them."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(timeout_s)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True
