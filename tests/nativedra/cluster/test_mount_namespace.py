"""The scheduler's mounts: a process started through in_mount_namespace sees the source directory at
the target path, keeps the pid it was started with, and the host's target stays as it was."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from nativedra.cluster.processes import Supervisor, alive, in_mount_namespace, running


def test_the_target_shows_the_source_only_inside(tmp_path: Path) -> None:
    source, target = tmp_path / "files", tmp_path / "etc" / "nativedra-extender"
    source.mkdir()
    (source / "ca.crt").write_text("the CA")
    script = 'cat "$0/ca.crt"; echo " $$"'
    exe, args = in_mount_namespace({target: source}, Path("/bin/sh"), ["-c", script, str(target)])
    try:
        process = subprocess.Popen([str(exe), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except PermissionError:  # pragma: no cover - the harness runs as root
        pytest.fail("unshare needs root (CAP_SYS_ADMIN), as the real-node harness has")
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    seen, pid = out.rsplit(" ", 1)
    assert seen == "the CA"
    assert int(pid) == process.pid  # unshare and sh exec: the recorded pid is the program's
    assert target.is_dir() and list(target.iterdir()) == []  # the host's directory stays empty


def test_a_wrapped_process_is_recorded_as_what_it_runs_and_is_stopped(tmp_path: Path) -> None:
    """The supervisor records the program the wrapper execs into, so it knows the process as running
    and stops it (recorded as unshare, it would be left behind by every restart)."""
    (tmp_path / "logs").mkdir()
    supervisor = Supervisor(tmp_path, dict, tie_to_parent=True)
    source, target = tmp_path / "files", tmp_path / "mnt"
    source.mkdir()
    sleep = Path(shutil.which("sleep") or "/bin/sleep")
    wrapper, args = in_mount_namespace({target: source}, sleep, ["300"])
    proc = supervisor.spawn("sleeper", wrapper, args, runs=sleep)
    deadline = time.monotonic() + 10
    while not running(proc) and time.monotonic() < deadline:  # until unshare and sh have exec'd
        time.sleep(0.05)
    assert running(proc)
    supervisor.stop("sleeper")
    assert not alive(proc.pid)
