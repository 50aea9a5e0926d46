"""Supervise the processes of a local cluster: started in their own session, logged, recorded by
PID with their executable in `state.json`, so `stop` never matches processes by name and another
process (`nativedra cluster down`) can stop a cluster that `nativedra cluster up` left running."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATE_FILE = "state.json"


@dataclass
class RecordedProcess:
    name: str
    pid: int
    exe: str
    log: str


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no orphan if the test run is killed


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); reap it if it is ours.
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return True


def _is_recorded(proc: RecordedProcess) -> bool:
    """True when `pid` still runs the recorded executable (not a recycled PID)."""
    try:
        return str(Path(f"/proc/{proc.pid}/exe").readlink()) == proc.exe
    except OSError:
        return False


def running(proc: RecordedProcess) -> bool:
    return alive(proc.pid) and _is_recorded(proc)


def terminate(proc: RecordedProcess, grace_s: float = 10.0) -> None:
    """SIGTERM the process group, SIGKILL after `grace_s`; returns once it is gone."""
    if not running(proc):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not alive(proc.pid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    while alive(proc.pid):
        time.sleep(0.05)


def tail(path: str, lines: int = 30) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class Supervisor:
    """The processes of one cluster, recorded in `<state_dir>/state.json` with `describe()`'s facts."""

    state_dir: Path
    describe: Callable[[], dict[str, Any]]
    tie_to_parent: bool = True
    processes: list[RecordedProcess] = field(default_factory=list)

    def spawn(
        self, name: str, exe: Path, args: list[str], env: dict[str, str] | None = None, runs: Path | None = None
    ) -> RecordedProcess:
        """Start a process that belongs to this cluster: recorded, logged, and stopped with it."""
        log_path = self.state_dir / "logs" / f"{name}.log"
        with log_path.open("ab") as out:
            popen = subprocess.Popen(
                [str(exe), *args],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent if self.tie_to_parent else None,  # noqa: PLW1509
            )
        # /proc/<pid>/exe names the resolved file, so record that (a venv's python is a symlink); `runs`:
        # what the process execs into (in_mount_namespace's unshare and sh keep the pid, not the exe).
        recorded = RecordedProcess(name, popen.pid, str(Path(runs or exe).resolve()), str(log_path))
        self.processes.append(recorded)
        self._save()
        return recorded

    def named(self, name: str) -> RecordedProcess:
        return next(p for p in self.processes if p.name == name)

    def stop(self, name: str | None = None) -> None:
        """Stop one named process, or all of them (newest first) and forget the record."""
        for proc in [p for p in reversed(self.processes) if name is None or p.name == name]:
            terminate(proc)
            self.processes.remove(proc)
        if name is None:
            with contextlib.suppress(FileNotFoundError):
                (self.state_dir / STATE_FILE).unlink()
        else:
            self._save()

    def _save(self) -> None:
        state = {**self.describe(), "processes": [proc.__dict__ for proc in self.processes]}
        tmp = self.state_dir / f".{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_dir / STATE_FILE)


def stop_recorded(state_dir: Path, only: str | None = None) -> list[str]:
    """Stop the processes recorded in `state_dir` (used by `nativedra cluster down`), or only the
    one named `only` (the record is then kept for the rest)."""
    state_path = state_dir / STATE_FILE
    if not state_path.exists():
        return []
    state = json.loads(state_path.read_text())
    stopped = []
    for entry in reversed(state["processes"]):
        proc = RecordedProcess(**entry)
        if (only is None or proc.name == only) and running(proc):
            terminate(proc)
            stopped.append(proc.name)
    if only is None:
        state_path.unlink()
    return stopped


def recorded_state(state_dir: Path) -> dict[str, Any] | None:
    """The recorded cluster with each process's liveness, or None when none is recorded."""
    state_path = state_dir / STATE_FILE
    if not state_path.exists():
        return None
    state: dict[str, Any] = json.loads(state_path.read_text())
    for entry in state["processes"]:
        entry["running"] = running(RecordedProcess(**entry))
    return state


def in_mount_namespace(mounts: Mapping[Path, Path], exe: Path, args: list[str]) -> tuple[Path, list[str]]:
    """`exe args` run by unshare(1) in a private mount namespace where each target path shows its
    source directory (a bind mount, as a static pod's hostPath volume): the process keeps its pid
    (unshare and sh exec it). An empty directory is made at a missing target, the only host change."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise FileNotFoundError("unshare (util-linux) is needed to give the scheduler its mounts")
    binds = []
    for target, source in mounts.items():
        target.mkdir(parents=True, exist_ok=True)
        binds.append(f"mount --bind {shlex.quote(str(source))} {shlex.quote(str(target))}")
    script = " && ".join([*binds, 'exec "$@"'])
    return Path(unshare), ["--mount", "--propagation", "private", "--", "sh", "-c", script, exe.name, str(exe), *args]
