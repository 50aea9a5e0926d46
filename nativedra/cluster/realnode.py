"""A real node for the local control plane: the upstream kubelet on containerd 2.x with runc.

The kubelet uses its ordinary root dir (/var/lib/kubelet) and the runtime reads CDI specs from
/var/run/cdi, so the plugin's DaemonSet runs exactly as shipped; one real node per machine. A fake
device tree (character devices with the NVIDIA major) stands in for the GPUs of the simulated
inventory. Pods get a bridge network; the `kubernetes` Service address answers on the host through
a forwarder to the loopback apiserver. With `kube_proxy`, the upstream kube-proxy (iptables mode)
routes every other Service's ClusterIP to its pods, from pods and from the host alike
(kube_proxy.py). Configuration builders are pure; `RealNode` starts, waits for and tears down the
processes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from dra_driver.kubelet_paths import DEFAULT_CDI_DIR, KUBELET_ROOT
from nativedra.base.kube.names import CDI_VENDOR
from nativedra.cluster import kube_proxy as proxy
from nativedra.cluster import pki
from nativedra.cluster.binaries import build_kubernetes
from nativedra.cluster.controlplane import ControlPlane, ControlPlaneError, free_port
from nativedra.cluster.credentials import write_kubeconfig
from nativedra.cluster.image import build_image, build_pause_image
from nativedra.cluster.node_runtime import NodeRuntime, resolve_runtime
from nativedra.cluster.nodes import remove_not_ready_taint
from nativedra.cluster.processes import alive, tail

log = logging.getLogger(__name__)

# The simulated-node overlay mounts this host directory: dev/ is the plugin's --dev-root and
# faults.yaml its --fault-file.
SIMULATED_ROOT = Path("/var/lib/nativedra/simulated")
MARKER = ".nativedra-real-node"  # in KUBELET_ROOT: this harness made it and may empty it
POD_SUBNET = "10.244.0.0/24"
BRIDGE = "nd-cni0"
NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255
CRI_NAMESPACE = "k8s.io"
RECORD_KEY = "realNode"
NODE_COMPONENTS = ["kubelet", "kube-proxy"]
READY_TIMEOUT_S = 120.0


class RealNodeError(ControlPlaneError):
    """The real node could not be set up, or did not become Ready."""


class ContainersUnavailableError(RealNodeError):
    """containerd runs but cannot start a container on this machine (no overlayfs, cgroups or
    namespaces for it): a property of the machine, not of nativedra."""


def fake_dev_tree(root: Path, gpu_minors: list[int]) -> None:
    """/dev/nvidia<minor> for each GPU and /dev/nvidiactl, as character devices with NVIDIA's
    major, so CDI specs carry the numbers a GPU node would give."""
    root.mkdir(parents=True, exist_ok=True)
    wanted = {f"nvidia{minor}": minor for minor in gpu_minors} | {"nvidiactl": NVIDIACTL_MINOR}
    for name, minor in wanted.items():
        path = root / name
        path.unlink(missing_ok=True)
        os.mknod(path, 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, minor))  # S_IFCHR


def cni_config(node_dir: Path) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "nativedra",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(node_dir / "cni" / "ipam"),
                },
            }
        ],
    }


def containerd_config(node_dir: Path, runtime: NodeRuntime, sandbox_image: str) -> str:
    """containerd 2.x configuration (version 4): CRI (CDI is always on in 2.x, reading our spec
    directory), runc with cgroupfs, our CNI, sockets under the node's directory."""
    socket = containerd_socket(node_dir)
    return f"""version = 4
root = "{node_dir / "containerd" / "root"}"
state = "{node_dir / "containerd" / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]

[plugins."io.containerd.server.v1.grpc"]
  address = "{socket}"

[plugins."io.containerd.server.v1.ttrpc"]
  address = "{socket}.ttrpc"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{sandbox_image}"

[plugins."io.containerd.cri.v1.runtime"]
  # Sandboxes would set these sysctls, and a negative oom_score_adj needs CAP_SYS_RESOURCE:
  # a machine like CI's refuses both.
  enable_unprivileged_ports = false
  enable_unprivileged_icmp = false
  restrict_oom_score_adj = true
  cdi_spec_dirs = ["{DEFAULT_CDI_DIR}"]
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{runtime.runc}"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{runtime.cni_bin_dir}"]
    conf_dir = "{node_dir / "cni" / "net.d"}"

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""


def containerd_socket(node_dir: Path) -> Path:
    return node_dir / "containerd" / "containerd.sock"


def kubelet_config(
    node_dir: Path, node_ip: str, ports: dict[str, int], client_ca: Path, gates: dict[str, bool]
) -> dict[str, Any]:
    """KubeletConfiguration for this kind of machine: cgroup v1/v2 hybrid, no systemd, swap on,
    loopback only. The apiserver authenticates with its kubelet client certificate."""
    endpoint = f"unix://{containerd_socket(node_dir)}"
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node_ip,
        "port": ports["kubelet"],
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": ports["kubelet_healthz"],
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": endpoint,
        "imageServiceEndpoint": endpoint,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failCgroupV1": False,
        "failSwapOn": False,
        "localStorageCapacityIsolation": False,
        "protectKernelDefaults": False,
        "makeIPTablesUtilChains": False,
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "registerNode": True,
        "serializeImagePulls": False,
        "resolvConf": "/etc/resolv.conf",
        "featureGates": dict(gates),
    }


def host_ip() -> str:
    """The address of the interface with the default route: the kubelet refuses a loopback node IP."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("203.0.113.1", 9))  # no packet is sent; this only picks the route
        except OSError as error:
            raise RealNodeError(f"a real node needs a network interface with a route: {error}") from error
        address = str(probe.getsockname()[0])
    if address.startswith("127."):
        raise RealNodeError("a real node needs a non-loopback address; this machine has only loopback")
    return address


def _run(args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise RealNodeError(f"`{' '.join(args)}` exited {result.returncode}: {result.stderr.strip()[-1000:]}")
    return result


def _mounts_under(*roots: Path) -> list[str]:
    """Mount points under `roots`, deepest first."""
    points = []
    with Path("/proc/self/mountinfo").open() as mountinfo:
        for line in mountinfo:
            point = line.split()[4].encode().decode("unicode_escape")
            if any(point == str(root) or point.startswith(f"{root}/") for root in roots):
                points.append(point)
    return sorted(set(points), key=len, reverse=True)


def unmount_under(*roots: Path) -> None:
    for point in _mounts_under(*roots):
        _run(["umount", "--lazy", point], check=False)


def root_is_shared() -> bool:
    with Path("/proc/self/mountinfo").open() as mountinfo:
        for line in mountinfo:
            fields = line.split()
            if fields[4] == "/":
                optional = fields[6 : fields.index("-")]
                return any(tag.startswith(("shared:", "master:")) for tag in optional)
    return False


def share_root_mount() -> None:
    """Make / a shared mount, as systemd does on every real node: the plugin's DaemonSet asks for
    HostToContainer and Bidirectional propagation, which containerd refuses on a private /."""
    if not root_is_shared():
        log.info("making / a shared mount (as systemd does on a real node) for mount propagation")
        _run(["mount", "--make-rshared", "/"])


def prepare_real_node(version: str, image_source: Path | None = None) -> list[Path]:
    """Everything a real node needs, built or installed now (so a test's timeout never includes
    it): Debian packages, containerd, the kubelet and kube-proxy, the pause image and, given a
    source tree, the nativedra image. Returns what was built."""
    runtime = resolve_runtime()
    node_bin = build_kubernetes(version, NODE_COMPONENTS)
    built = [runtime.containerd_bin, *(node_bin / name for name in NODE_COMPONENTS), build_pause_image()[1]]
    if image_source is not None:
        built.append(build_image(image_source)[1])
    return built


def prepare_kubelet_root() -> None:
    """Empty /var/lib/kubelet when this harness made it (or no kubelet ever ran pods from it);
    refuse a real node's."""
    if (KUBELET_ROOT / "pods").exists() and not (KUBELET_ROOT / MARKER).exists():
        raise RealNodeError(
            f"{KUBELET_ROOT} exists and was not made by nativedra: this machine looks like a real node; "
            "a local real node needs a machine without a kubelet"
        )
    unmount_under(KUBELET_ROOT)
    shutil.rmtree(KUBELET_ROOT, ignore_errors=True)
    KUBELET_ROOT.mkdir(parents=True)
    (KUBELET_ROOT / MARKER).write_text("made by nativedra's local real node; emptied on its next start\n")
    DEFAULT_CDI_DIR.mkdir(parents=True, exist_ok=True)
    for spec in DEFAULT_CDI_DIR.glob(f"{CDI_VENDOR}*"):
        spec.unlink()


@dataclass
class RealNode:
    """One kubelet + containerd node registered with `plane`, named `name`."""

    plane: ControlPlane
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    gpu_minors: list[int] = field(default_factory=lambda: list(range(8)))
    repo: Path | None = None  # the tree whose image the node gets (None: no nativedra image)
    image: str | None = None
    kube_proxy: bool = False  # also run kube-proxy, so Services' ClusterIPs reach their pods
    _runtime: NodeRuntime | None = None
    _added_service_ip: bool = False
    _kube_proxy_bin: Path | None = None

    @property
    def node_dir(self) -> Path:
        return self.plane.state_dir / "nodes" / self.name

    @property
    def runtime(self) -> NodeRuntime:
        if self._runtime is None:
            raise RealNodeError("the real node has not been started")
        return self._runtime

    def start(self) -> None:
        self._runtime = resolve_runtime()
        node_bin = build_kubernetes(self.plane.binaries.version, NODE_COMPONENTS)
        pause_image, pause_archive = build_pause_image()
        archives = [pause_archive]
        if self.repo is not None:
            self.image, archive = build_image(self.repo)
            archives.append(archive)
        prepare_kubelet_root()
        share_root_mount()
        fake_dev_tree(SIMULATED_ROOT / "dev", self.gpu_minors)
        (SIMULATED_ROOT / "faults.yaml").unlink(missing_ok=True)
        self._save_record()
        try:
            self._start_containerd(pause_image)
            for archive in archives:
                self.ctr("images", "import", "--no-unpack=false", str(archive))
            self._check_containers(pause_image)
            self._start_service_forwarder()
            self._start_kubelet(node_bin / "kubelet")
            self._wait_registered()
            if self.kube_proxy:
                self._start_kube_proxy(node_bin / "kube-proxy")
        except BaseException:
            self.stop()
            raise

    def _check_containers(self, image: str) -> None:
        """One container, run and removed, before the kubelet depends on it."""
        try:
            self.ctr("run", "--rm", "--net-host", image, f"nativedra-check-{os.getpid()}", "true")
        except RealNodeError as error:
            raise ContainersUnavailableError(f"containers cannot run on this machine: {error}") from error

    def ctr(self, *args: str) -> str:
        return _ctr(self.record, *args)

    def _start_containerd(self, sandbox_image: str) -> None:
        net_d = self.node_dir / "cni" / "net.d"
        net_d.mkdir(parents=True, exist_ok=True)
        (net_d / "10-nativedra.conflist").write_text(json.dumps(cni_config(self.node_dir), indent=2))
        config = self.node_dir / "containerd.toml"
        config.write_text(containerd_config(self.node_dir, self.runtime, sandbox_image))
        env = dict(os.environ, PATH=f"{self.runtime.containerd_bin}:{os.environ.get('PATH', '')}")
        self.plane.supervisor.spawn(
            f"containerd-{self.name}", self.runtime.containerd, ["--config", str(config)], env=env
        )
        self._wait(lambda: containerd_socket(self.node_dir).is_socket(), f"containerd-{self.name}", "its socket")

    def _start_service_forwarder(self) -> None:
        """What kube-proxy would do for the `kubernetes` Service: pods reach the apiserver at its
        ClusterIP (in-cluster clients use it), forwarded to the loopback apiserver."""
        present = _run(["ip", "-o", "addr", "show", "dev", "lo"]).stdout
        if f" {pki.KUBERNETES_SERVICE_IP}/" not in present:
            _run(["ip", "addr", "add", f"{pki.KUBERNETES_SERVICE_IP}/32", "dev", "lo"])
            self._added_service_ip = True
        self._save_record()
        socat = shutil.which("socat")
        if socat is None:
            raise RealNodeError("socat is missing")
        port = self.plane.layout.ports["apiserver"]
        self.plane.supervisor.spawn(
            "service-forwarder",
            Path(socat),
            [f"TCP-LISTEN:443,bind={pki.KUBERNETES_SERVICE_IP},fork,reuseaddr", f"TCP:127.0.0.1:{port}"],
        )

    def _start_kubelet(self, kubelet: Path) -> None:
        ports = {"kubelet": free_port(), "kubelet_healthz": free_port()}
        certs = self.plane.layout.certs
        cert, key = pki.node_client(certs, self.name, self.node_dir / "pki")
        kubeconfig = write_kubeconfig(
            self.node_dir / "kubelet.kubeconfig",
            self.plane.server,
            certs.ca_cert,
            f"system:node:{self.name}",
            {"client-certificate": str(cert), "client-key": str(key)},
        )
        config = self.node_dir / "kubelet-config.yaml"
        gates = dict(self.plane.features.gates)
        node_ip = host_ip()
        config.write_text(yaml.safe_dump(kubelet_config(self.node_dir, node_ip, ports, certs.ca_cert, gates)))
        labels = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        self.plane.supervisor.spawn(
            f"kubelet-{self.name}",
            kubelet,
            [
                f"--config={config}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={KUBELET_ROOT}",
                f"--cert-dir={self.node_dir / 'kubelet-pki'}",
                f"--hostname-override={self.name}",
                f"--node-ip={node_ip}",
                *([f"--node-labels={labels}"] if labels else []),
            ],
        )

    def _start_kube_proxy(self, binary: Path) -> None:
        api = self.plane.api_client()
        proxy.leave_kubernetes_service_to_forwarder(api)
        kubeconfig = proxy.service_account_kubeconfig(
            api, self.node_dir / "kube-proxy.kubeconfig", self.plane.server, self.plane.layout.certs.ca_cert
        )
        ports = {"healthz": free_port(), "metrics": free_port()}
        config = self.node_dir / "kube-proxy-config.yaml"
        config.write_text(yaml.safe_dump(proxy.kube_proxy_config(kubeconfig, self.name, POD_SUBNET, ports)))
        self._kube_proxy_bin = binary  # recorded before it starts: teardown removes its rules
        self._save_record()
        self.plane.supervisor.spawn(proxy.PROCESS, binary, [f"--config={config}"])
        self._wait(lambda: proxy.healthy(ports["healthz"]), proxy.PROCESS, "its first sync of the iptables rules")

    def _wait_registered(self) -> None:
        core = client.CoreV1Api(self.plane.api_client())

        def ready() -> bool:
            try:
                node = core.read_node(self.name)
            except client.ApiException:
                return False
            conditions = {c.type: c.status for c in (node.status.conditions or [])}
            return conditions.get("Ready") == "True"

        self._wait(ready, f"kubelet-{self.name}", "the Node to be Ready")
        remove_not_ready_taint(core, self.name)

    def _wait(self, probe: Any, process: str, what: str) -> None:
        proc = self.plane.supervisor.named(process)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if probe():
                return
            if not alive(proc.pid):
                raise RealNodeError(f"{process} exited while waiting for {what}; last log lines:\n{tail(proc.log)}")
            time.sleep(0.5)
        raise RealNodeError(f"timed out after {READY_TIMEOUT_S:.0f}s waiting for {what}; log:\n{tail(proc.log)}")

    @property
    def record(self) -> NodeRecord:
        return NodeRecord(
            name=self.name,
            ctr=str(self.runtime.ctr),
            socket=str(containerd_socket(self.node_dir)),
            node_dir=str(self.node_dir),
            added_service_ip=self._added_service_ip,
            kube_proxy=str(self._kube_proxy_bin) if self._kube_proxy_bin else None,
        )

    def _save_record(self) -> None:
        self.plane.notes[RECORD_KEY] = self.record.__dict__

    def stop(self) -> None:
        """Stop the kubelet, every container, containerd and the forwarder; unmount what they mounted."""
        if self._runtime is None:
            return
        supervisor = self.plane.supervisor
        names = {p.name for p in supervisor.processes}
        teardown(self.record, lambda name: supervisor.stop(name) if name in names else None)
        self._added_service_ip = False
        self._kube_proxy_bin = None
        self.plane.notes.pop(RECORD_KEY, None)


@dataclass(frozen=True)
class NodeRecord:
    """What tearing a real node down needs, kept in the cluster's state file for `cluster down`."""

    name: str
    ctr: str
    socket: str
    node_dir: str
    added_service_ip: bool
    kube_proxy: str | None = None  # its binary, when it ran: `--cleanup` removes its rules


def teardown(record: NodeRecord, stop_process: Callable[[str], object]) -> None:
    """kube-proxy and its iptables rules, the kubelet (it would restart containers), then every
    container while containerd still answers, containerd, leftover shims, the forwarder, mounts and
    the pod network."""
    if record.kube_proxy:
        stop_process(proxy.PROCESS)
        cleaned = proxy.cleanup(Path(record.kube_proxy))
        if cleaned.returncode != 0:
            log.warning("kube-proxy --cleanup exited %d: %s", cleaned.returncode, cleaned.stderr.strip()[-1000:])
    stop_process(f"kubelet-{record.name}")
    _kill_containers(record)
    stop_process(f"containerd-{record.name}")
    _kill_shims(record.socket)
    stop_process("service-forwarder")
    unmount_under(KUBELET_ROOT, Path(record.node_dir))
    _run(["ip", "link", "delete", BRIDGE], check=False)
    if record.added_service_ip:
        _run(["ip", "addr", "del", f"{pki.KUBERNETES_SERVICE_IP}/32", "dev", "lo"], check=False)


def teardown_recorded(state: dict[str, Any], stop_process: Callable[[str], object]) -> None:
    """`nativedra cluster down` for a cluster recorded with a real node."""
    recorded = state.get(RECORD_KEY)
    if recorded:
        teardown(NodeRecord(**recorded), stop_process)


def _ctr(record: NodeRecord, *args: str) -> str:
    return _run([record.ctr, "--address", record.socket, "-n", CRI_NAMESPACE, *args]).stdout


def _kill_containers(record: NodeRecord) -> None:
    if not Path(record.socket).is_socket():
        return
    with contextlib.suppress(RealNodeError):
        for task in _ctr(record, "tasks", "list", "--quiet").split():
            with contextlib.suppress(RealNodeError):
                _ctr(record, "tasks", "kill", "--all", "--signal", "SIGKILL", task)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _ctr(record, "tasks", "list", "--quiet").strip():
            for task in _ctr(record, "tasks", "list", "--quiet").split():
                with contextlib.suppress(RealNodeError):
                    _ctr(record, "tasks", "delete", "--force", task)
            time.sleep(0.2)


def _kill_shims(socket_path: str) -> None:
    """Shims outlive containerd by design; ours are the ones started with our socket."""
    address = socket_path.encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"containerd-shim" in cmdline and address in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)
