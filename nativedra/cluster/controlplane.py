"""Run etcd, kube-apiserver, kube-scheduler and kube-controller-manager on 127.0.0.1.

Every process is started in its own session and recorded by PID (with its executable) in
`state.json`, so `stop` never matches processes by name and a different process (`nativedra
cluster down`) can stop a cluster that `nativedra cluster up` left running.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nativedra.cluster import pki as pki_mod
from nativedra.cluster.binaries import Binaries, minor_of

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
ADMIN_USER = "nativedra-admin"
# Beta/alpha DRA gates that exist in 1.36; GA gates are accepted as =true while they still exist.
DRA_FEATURE_GATES_136 = (
    "DynamicResourceAllocation",
    "DRAAdminAccess",
    "DRAPrioritizedList",
    "DRAConsumableCapacity",
    "DRADeviceBindingConditions",
    "DRADeviceTaints",
    "DRADeviceTaintRules",
    "DRAExtendedResource",
    "DRAPartitionableDevices",
    "DRAResourceClaimDeviceStatus",
    "DRASchedulerFilterTimeout",
)
READY_TIMEOUT_S = 90.0


class ControlPlaneError(RuntimeError):
    """The control plane could not be started, or is not running."""


def feature_gates(version: str) -> str:
    if minor_of(version) < 36:
        raise ControlPlaneError(f"Kubernetes {version} is older than the 1.36 this harness supports")
    return ",".join(f"{gate}=true" for gate in DRA_FEATURE_GATES_136)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def deep_merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Merge `extra` into `base`: nested mappings merge, everything else (lists too) replaces."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no orphan if the test run is killed


@dataclass
class RecordedProcess:
    name: str
    pid: int
    exe: str
    log: str


@dataclass
class ControlPlane:
    """A loopback control plane whose files live under `state_dir`."""

    state_dir: Path
    binaries: Binaries
    scheduler_config_extra: Mapping[str, Any] = field(default_factory=dict)
    tie_to_parent: bool = True
    processes: list[RecordedProcess] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    _tokens: dict[str, str] = field(default_factory=dict)

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    def start(self) -> None:
        if (self.state_dir / STATE_FILE).exists():
            raise ControlPlaneError(
                f"a control plane is already recorded in {self.state_dir}; stop it first (nativedra cluster down)"
            )
        if self.state_dir.exists():
            shutil.rmtree(self.state_dir)
        self.state_dir.mkdir(parents=True)
        (self.state_dir / "logs").mkdir()
        self.ports = {name: free_port() for name in ("etcd", "etcd_peer", "apiserver", "scheduler", "kcm")}
        certs = pki_mod.create(self.state_dir / "pki")
        self._tokens = {
            ADMIN_USER: secrets.token_hex(16),
            "system:kube-scheduler": secrets.token_hex(16),
            "system:kube-controller-manager": secrets.token_hex(16),
        }
        token_file = self.state_dir / "pki" / "tokens.csv"
        token_file.write_text(
            f'{self._tokens[ADMIN_USER]},{ADMIN_USER},uid-admin,"system:masters"\n'
            f"{self._tokens['system:kube-scheduler']},system:kube-scheduler,uid-scheduler\n"
            f"{self._tokens['system:kube-controller-manager']},system:kube-controller-manager,uid-kcm\n"
        )
        token_file.chmod(0o600)
        self._write_kubeconfig(self.kubeconfig, ADMIN_USER, certs.ca_cert)
        try:
            self._start_etcd()
            self._start_apiserver(certs, token_file)
            self._wait_ready("kube-apiserver", f"{self.server}/readyz", token=self._tokens[ADMIN_USER])
            self._start_scheduler(certs)
            self._start_controller_manager(certs)
            self._wait_ready("kube-scheduler", f"https://127.0.0.1:{self.ports['scheduler']}/healthz")
            self._wait_ready("kube-controller-manager", f"https://127.0.0.1:{self.ports['kcm']}/healthz")
        except BaseException:
            self.stop()
            raise

    def restart_scheduler(self, scheduler_config_extra: Mapping[str, Any]) -> None:
        """Replace the scheduler with one that uses new extra configuration (e.g. an extender)."""
        self.scheduler_config_extra = scheduler_config_extra
        for proc in [p for p in self.processes if p.name == "kube-scheduler"]:
            _terminate(proc)
            self.processes.remove(proc)
        self._start_scheduler(pki_mod.paths(self.state_dir / "pki"))
        self._wait_ready("kube-scheduler", f"https://127.0.0.1:{self.ports['scheduler']}/healthz")

    def stop(self) -> None:
        for proc in reversed(self.processes):
            _terminate(proc)
        self.processes.clear()
        with contextlib.suppress(FileNotFoundError):
            (self.state_dir / STATE_FILE).unlink()

    # -- process start-up -------------------------------------------------------------------

    def spawn(self, name: str, exe: Path, args: list[str]) -> RecordedProcess:
        """Start a process that belongs to this cluster: recorded, logged, and stopped with it."""
        log_path = self.state_dir / "logs" / f"{name}.log"
        with log_path.open("ab") as out:
            popen = subprocess.Popen(
                [str(exe), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent if self.tie_to_parent else None,  # noqa: PLW1509
            )
        # /proc/<pid>/exe names the resolved file, so record that (a venv's python is a symlink).
        recorded = RecordedProcess(name, popen.pid, str(Path(exe).resolve()), str(log_path))
        self.processes.append(recorded)
        self._save_state()
        return recorded

    def _save_state(self) -> None:
        state = {
            "version": self.binaries.version,
            "kubeconfig": str(self.kubeconfig),
            "server": self.server,
            "processes": [proc.__dict__ for proc in self.processes],
        }
        tmp = self.state_dir / f".{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_dir / STATE_FILE)

    def _start_etcd(self) -> None:
        data = self.state_dir / "etcd"
        data.mkdir(mode=0o700)
        etcd_url = f"http://127.0.0.1:{self.ports['etcd']}"
        self.spawn(
            "etcd",
            self.binaries.etcd,
            [
                f"--data-dir={data}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{self.ports['etcd_peer']}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{self.ports['etcd_peer']}",
                f"--initial-cluster=default=http://127.0.0.1:{self.ports['etcd_peer']}",
                "--unsafe-no-fsync",  # throwaway test data: durability is not needed, speed is
                "--log-level=warn",
            ],
        )

    def _start_apiserver(self, certs: pki_mod.Pki, token_file: Path) -> None:
        gates = feature_gates(self.binaries.version)
        self.spawn(
            "kube-apiserver",
            self.binaries.kube_apiserver,
            [
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.ports['apiserver']}",
                "--endpoint-reconciler-type=none",
                f"--cert-dir={self.state_dir / 'pki'}",
                f"--tls-cert-file={certs.serving_cert}",
                f"--tls-private-key-file={certs.serving_key}",
                f"--client-ca-file={certs.ca_cert}",
                f"--token-auth-file={token_file}",
                f"--requestheader-client-ca-file={certs.front_proxy_ca}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={certs.front_proxy_client_cert}",
                f"--proxy-client-key-file={certs.front_proxy_client_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={certs.service_account_pub}",
                f"--service-account-signing-key-file={certs.service_account_key}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                # DRADeviceTaintRules makes the scheduler watch v1beta2 DeviceTaintRules; 1.36 does not
                # serve v1beta2 by default, and without it the scheduler never reports healthy.
                "--runtime-config=resource.k8s.io/v1=true,resource.k8s.io/v1beta2=true",
                f"--feature-gates={gates}",
            ],
        )

    def _start_scheduler(self, certs: pki_mod.Pki) -> None:
        kubeconfig = self.state_dir / "scheduler.kubeconfig"
        self._write_kubeconfig(kubeconfig, "system:kube-scheduler", certs.ca_cert)
        config = deep_merge(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {"kubeconfig": str(kubeconfig)},
                "leaderElection": {"leaderElect": False},
            },
            self.scheduler_config_extra,
        )
        config_path = self.state_dir / "scheduler-config.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.spawn(
            "kube-scheduler",
            self.binaries.kube_scheduler,
            [
                f"--config={config_path}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['scheduler']}",
                f"--tls-cert-file={certs.serving_cert}",
                f"--tls-private-key-file={certs.serving_key}",
                f"--feature-gates={feature_gates(self.binaries.version)}",
            ],
        )

    def _start_controller_manager(self, certs: pki_mod.Pki) -> None:
        kubeconfig = self.state_dir / "controller-manager.kubeconfig"
        self._write_kubeconfig(kubeconfig, "system:kube-controller-manager", certs.ca_cert)
        self.spawn(
            "kube-controller-manager",
            self.binaries.kube_controller_manager,
            [
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports['kcm']}",
                f"--tls-cert-file={certs.serving_cert}",
                f"--tls-private-key-file={certs.serving_key}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={certs.service_account_key}",
                f"--root-ca-file={certs.ca_cert}",
                f"--cluster-signing-cert-file={certs.ca_cert}",
                f"--cluster-signing-key-file={certs.ca_key}",
                # No kubelet runs: the node-lifecycle controller would taint every fake node.
                "--controllers=*,-node-lifecycle-controller",
                f"--feature-gates={feature_gates(self.binaries.version)}",
            ],
        )

    def _write_kubeconfig(self, path: Path, user: str, ca_cert: Path) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "nativedra",
                    "cluster": {"server": self.server, "certificate-authority": str(ca_cert)},
                }
            ],
            "users": [{"name": user, "user": {"token": self._tokens[user]}}],
            "contexts": [{"name": "nativedra", "context": {"cluster": "nativedra", "user": user}}],
            "current-context": "nativedra",
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)

    def _wait_ready(self, name: str, url: str, token: str | None = None) -> None:
        context = ssl.create_default_context(cafile=str(self.state_dir / "pki" / "ca.crt"))
        request = urllib.request.Request(url)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        deadline = time.monotonic() + READY_TIMEOUT_S
        last_error = ""
        while time.monotonic() < deadline:
            proc = next(p for p in self.processes if p.name == name)
            if not _alive(proc.pid):
                raise ControlPlaneError(f"{name} exited during start-up; last log lines:\n{_tail(proc.log)}")
            try:
                with urllib.request.urlopen(request, context=context, timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError) as error:
                last_error = str(error)
            time.sleep(0.25)
        proc = next(p for p in self.processes if p.name == name)
        raise ControlPlaneError(
            f"{name} not ready at {url} after {READY_TIMEOUT_S:.0f}s ({last_error}); log:\n{_tail(proc.log)}"
        )


def _tail(path: str, lines: int = 30) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _alive(pid: int) -> bool:
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


def _terminate(proc: RecordedProcess, grace_s: float = 10.0) -> None:
    if not _alive(proc.pid) or not _is_recorded(proc):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not _alive(proc.pid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    while _alive(proc.pid):
        time.sleep(0.05)


def stop_recorded(state_dir: Path) -> list[str]:
    """Stop the processes recorded in `state_dir` (used by `nativedra cluster down`)."""
    state_path = state_dir / STATE_FILE
    if not state_path.exists():
        return []
    state = json.loads(state_path.read_text())
    stopped = []
    for entry in reversed(state["processes"]):
        proc = RecordedProcess(**entry)
        if _alive(proc.pid) and _is_recorded(proc):
            _terminate(proc)
            stopped.append(proc.name)
    state_path.unlink()
    return stopped


def recorded_state(state_dir: Path) -> dict[str, Any] | None:
    """The recorded cluster with each process's liveness, or None when none is recorded."""
    state_path = state_dir / STATE_FILE
    if not state_path.exists():
        return None
    state: dict[str, Any] = json.loads(state_path.read_text())
    for entry in state["processes"]:
        entry["running"] = _alive(entry["pid"]) and _is_recorded(RecordedProcess(**entry))
    return state
