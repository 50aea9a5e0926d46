"""Run etcd, kube-apiserver, kube-scheduler and kube-controller-manager on 127.0.0.1.

This module orders the start-up and waits for readiness; the flags are in `components`, the
identities in `credentials`, the process records in `processes`, the TLS material in `pki`.
"""

from __future__ import annotations

import dataclasses
import functools
import http.client
import logging
import random
import shutil
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from nativedra.cluster import components, pki
from nativedra.cluster.binaries import Binaries
from nativedra.cluster.credentials import ADMIN_USER, CONTROLLER_MANAGER_USER, SCHEDULER_USER, Credentials
from nativedra.cluster.processes import (
    STATE_FILE,
    RecordedProcess,
    Supervisor,
    alive,
    in_mount_namespace,
    recorded_state,
    stop_recorded,
    tail,
)

__all__ = ["ControlPlane", "ControlPlaneError", "PortTakenError", "free_port", "recorded_state", "stop_recorded"]

READY_TIMEOUT_S = 90.0
COMPONENTS = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")
MARKER = ".nativedra-cluster"  # marks a directory this harness created and may empty
log = logging.getLogger(__name__)


class ControlPlaneError(RuntimeError):
    """The control plane could not be started, or is not running."""


class PortTakenError(ControlPlaneError):
    """A component exited at start-up because another process held its port."""


PORT_ATTEMPTS = 3  # etcd, the API server and the others take their ports as flags: on a taken one, new ports


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
PORT_FLOOR = 20_000  # below it sit ports services bind by default (10248-10259: kubelet, scheduler, ...)
_handed_out: set[int] = set()
_handing_out = threading.Lock()
_random = random.Random()  # noqa: S311 - spreads picks over the range; nothing secret


def _ephemeral_ports() -> range:
    """The ports the kernel gives outgoing connections (and `bind(0)`)."""
    try:
        low, high = (int(word) for word in EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    return range(low, high + 1)


@functools.cache
def _candidates(ephemeral: range) -> list[int]:
    return [port for port in range(PORT_FLOOR, 65536) if port not in ephemeral]


def free_port() -> int:
    """A loopback port nothing listens on, for a component to bind later. Picked outside the
    kernel's ephemeral range: a port from it can be taken by any outgoing connection before the
    component binds it (CI saw 'address already in use'); and never one this process handed out
    already, which its component may not have bound yet."""
    ephemeral = _ephemeral_ports()
    candidates = _candidates(ephemeral)
    with _handing_out:
        for _ in range(200):
            port = _random.choice(candidates)
            if port in _handed_out:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    raise ControlPlaneError(f"no free loopback port between {PORT_FLOOR} and 65535 outside {ephemeral}")


def prepare_state_dir(state_dir: Path) -> None:
    """Create `state_dir`, or empty one this harness made before; never touch anyone else's files."""
    if (state_dir / STATE_FILE).exists():
        raise ControlPlaneError(
            f"a control plane is already recorded in {state_dir}; stop it first (nativedra cluster down)"
        )
    if state_dir.exists():
        if not state_dir.is_dir():
            raise ControlPlaneError(f"--state-dir {state_dir} exists and is not a directory")
        if any(state_dir.iterdir()) and not (state_dir / MARKER).exists():
            raise ControlPlaneError(
                f"--state-dir {state_dir} is not empty and was not made by nativedra; choose an empty or new directory"
            )
        shutil.rmtree(state_dir)
    state_dir.mkdir(parents=True)
    (state_dir / MARKER).write_text("made by `nativedra cluster up`; its contents are replaced on the next start\n")
    (state_dir / "logs").mkdir()


@dataclass
class ControlPlane:
    """A loopback control plane whose files live under `state_dir`."""

    state_dir: Path
    binaries: Binaries
    scheduler_config_extra: Mapping[str, Any] = field(default_factory=dict)
    # Directories the scheduler sees at other paths (target -> source), as a static pod's hostPath
    # mounts: bound in a mount namespace of its own, so the host's paths are never written.
    scheduler_mounts: Mapping[Path, Path] = field(default_factory=dict)
    tie_to_parent: bool = True
    features: components.Features = components.DEFAULTS
    notes: dict[str, Any] = field(default_factory=dict)  # more facts for the state file (e.g. a real node)
    controller_manager_flags: tuple[str, ...] = ()  # appended to its flags (e.g. a benchmark's client rate)
    _layout: components.Layout | None = None
    _credentials: Credentials = field(default_factory=Credentials)
    _supervisor: Supervisor | None = None

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "admin.kubeconfig"

    @property
    def layout(self) -> components.Layout:
        if self._layout is None:
            raise ControlPlaneError("the control plane has not been started")
        return self._layout

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.layout.ports['apiserver']}"

    @property
    def supervisor(self) -> Supervisor:
        if self._supervisor is None:
            self._supervisor = Supervisor(self.state_dir, self._describe, self.tie_to_parent)
        return self._supervisor

    def start(self) -> None:
        """Start every component and wait until each is ready. The components take their ports as
        flags, so the ports are picked first (`free_port`); one another process takes before its
        component binds it makes that component exit, and the whole start is tried again on new
        ports (up to PORT_ATTEMPTS times)."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self._start_once()
                return
            except PortTakenError as error:
                if attempt == PORT_ATTEMPTS:
                    raise
                log.warning("control plane start %d of %d: %s; again on new ports", attempt, PORT_ATTEMPTS, error)

    def _start_once(self) -> None:
        prepare_state_dir(self.state_dir)
        self._layout = components.Layout(
            state_dir=self.state_dir,
            ports={name: free_port() for name in components.PORT_NAMES},
            certs=pki.create(self.state_dir / "pki"),
            features=self.features,
        )
        ca = self.layout.certs.ca_cert
        token_file = self._credentials.write_token_file(self.state_dir / "pki" / "tokens.csv")
        self._credentials.write_kubeconfig(self.kubeconfig, ADMIN_USER, self.server, ca)
        self._credentials.write_kubeconfig(self.layout.kubeconfig("scheduler"), SCHEDULER_USER, self.server, ca)
        self._credentials.write_kubeconfig(
            self.layout.kubeconfig("controller-manager"), CONTROLLER_MANAGER_USER, self.server, ca
        )
        try:
            (self.state_dir / "etcd").mkdir(mode=0o700)
            self.spawn("etcd", self.binaries.etcd, components.etcd_args(self.layout))
            self.spawn(
                "kube-apiserver", self.binaries.kube_apiserver, components.apiserver_args(self.layout, token_file)
            )
            self._wait_ready("kube-apiserver", f"{self.server}/readyz", token=self._credentials.tokens[ADMIN_USER])
            self._start_scheduler()
            self.spawn(
                "kube-controller-manager",
                self.binaries.kube_controller_manager,
                [*components.controller_manager_args(self.layout), *self.controller_manager_flags],
            )
            self._wait_ready("kube-controller-manager", f"https://127.0.0.1:{self.layout.ports['kcm']}/healthz")
            self._wait_default_service_account()
        except BaseException:
            self.stop()
            raise

    def _wait_default_service_account(self) -> None:
        """Pods are refused until their namespace's `default` ServiceAccount exists, which the
        controller manager creates a moment after it is healthy: a pod created right after `up`
        would fail with 'serviceaccount "default" not found'."""
        core = client.CoreV1Api(self.api_client())
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                core.read_namespaced_service_account("default", "default")
                return
            except client.ApiException as error:
                if error.status != 404 or time.monotonic() > deadline:
                    raise ControlPlaneError(
                        f"the default namespace's default ServiceAccount: {error.status} {error.reason}"
                    ) from error
            time.sleep(0.1)

    def api_client(self) -> client.ApiClient:
        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def restart_scheduler(
        self, scheduler_config_extra: Mapping[str, Any], mounts: Mapping[Path, Path] | None = None
    ) -> None:
        """Replace the scheduler with one that uses new extra configuration (e.g. an extender) and
        `mounts`. It binds the port the old one freed; if another process took it meanwhile, a new port."""
        self.scheduler_config_extra = scheduler_config_extra
        self.scheduler_mounts = dict(mounts or {})
        self.supervisor.stop("kube-scheduler")
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self._start_scheduler()
                return
            except PortTakenError:
                self.supervisor.stop("kube-scheduler")
                if attempt == PORT_ATTEMPTS:
                    raise
                self._layout = dataclasses.replace(self.layout, ports={**self.layout.ports, "scheduler": free_port()})

    def stop(self) -> None:
        self.supervisor.stop()

    def metrics(self, component: str) -> str:
        """The Prometheus metrics of "apiserver" or "scheduler", read as the admin."""
        url = f"https://127.0.0.1:{self.layout.ports[component]}/metrics"
        with self._get(url, self._credentials.tokens[ADMIN_USER], timeout_s=10) as response:
            return str(response.read().decode())

    def _get(self, url: str, token: str | None, timeout_s: float) -> http.client.HTTPResponse:
        """A GET of one of the plane's HTTPS endpoints, trusting its CA, with `token` if any."""
        context = ssl.create_default_context(cafile=str(self.layout.certs.ca_cert))
        request = urllib.request.Request(url)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        response: http.client.HTTPResponse = urllib.request.urlopen(request, context=context, timeout=timeout_s)
        return response

    def spawn(self, name: str, exe: Path, args: list[str]) -> RecordedProcess:
        """Start a process that belongs to this cluster: recorded, logged, and stopped with it."""
        return self.supervisor.spawn(name, exe, args)

    def _describe(self) -> dict[str, Any]:
        facts = {"version": self.binaries.version, "kubeconfig": str(self.kubeconfig), "server": self.server}
        return {**facts, **self.notes}

    def _start_scheduler(self) -> None:
        config_path = self.state_dir / "scheduler-config.yaml"
        config = components.scheduler_config(self.layout, self.scheduler_config_extra)
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        args = components.scheduler_args(self.layout, config_path)
        scheduler = self.binaries.kube_scheduler
        if self.scheduler_mounts:
            wrapper, wrapped = in_mount_namespace(self.scheduler_mounts, scheduler, args)
            self.supervisor.spawn("kube-scheduler", wrapper, wrapped, runs=scheduler)
        else:
            self.spawn("kube-scheduler", scheduler, args)
        self._wait_ready("kube-scheduler", f"https://127.0.0.1:{self.layout.ports['scheduler']}/healthz")

    def _wait_ready(self, name: str, url: str, token: str | None = None) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        last_error = ""
        proc = self.supervisor.named(name)
        while time.monotonic() < deadline:
            # The one awaited, or a component it needs (etcd under the API server): either exiting ends the wait.
            for each in [p for p in self.supervisor.processes if p.name in (name, *COMPONENTS)]:
                if not alive(each.pid):
                    last_lines = tail(each.log)
                    error = PortTakenError if "address already in use" in last_lines else ControlPlaneError
                    raise error(f"{each.name} exited during start-up; last log lines:\n{last_lines}")
            try:
                with self._get(url, token, timeout_s=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError) as error:
                last_error = str(error)
            time.sleep(0.25)
        raise ControlPlaneError(
            f"{name} not ready at {url} after {READY_TIMEOUT_S:.0f}s ({last_error}); log:\n{tail(proc.log)}"
        )
