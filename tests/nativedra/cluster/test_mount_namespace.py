"""The scheduler's mounts: a process started through in_mount_namespace sees the source directory at
the target path, keeps the pid it was started with, and the host's target stays as it was."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from nativedra.cluster.processes import in_mount_namespace


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
