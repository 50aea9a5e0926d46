"""Where the plugin meets the kubelet and the runtime on the host: directory defaults, socket
layout (kubelet plugin conventions) and the plugin's own data directory. One owner for these
paths: the plugin, its probe, the demo and the tests all ask here."""

from __future__ import annotations

import argparse
import base64
import hashlib
import re
from pathlib import Path

from nativedra.base.cmdline.flags import add_flag
from nativedra.base.kube.names import DRIVER_NAME

KUBELET_ROOT = Path("/var/lib/kubelet")  # the kubelet's --root-dir default
DEFAULT_REGISTRY_DIR = KUBELET_ROOT / "plugins_registry"
DEFAULT_PLUGIN_DIR = KUBELET_ROOT / "plugins"
DEFAULT_CDI_DIR = Path("/var/run/cdi")
CDI_SEARCH_DIRS = (Path("/etc/cdi"), DEFAULT_CDI_DIR)  # where runtimes look for (vendor) CDI specs
DEFAULT_DEV_ROOT = Path("/dev")
DEFAULT_SYS_ROOT = Path("/sys")
MAX_UNIX_PATH = 107  # sun_path holds 108 bytes including the terminating NUL
_POD_UID = re.compile(r"[0-9a-f-]{1,64}")


def _short(data: bytes, length: int) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")[:length]


def data_dir(plugin_dir: Path) -> Path:
    """Plugin state (checkpoint, DRA socket); the same path inside and outside the container."""
    return plugin_dir / DRIVER_NAME


def registration_socket(registry_dir: Path, pod_uid: str | None = None) -> Path:
    """`<driver>-reg.sock`, or per pod `<driver>-<podUID>-reg.sock` for seamless rolling updates."""
    if not pod_uid:
        return registry_dir / f"{DRIVER_NAME}-reg.sock"
    if not _POD_UID.fullmatch(pod_uid):
        raise ValueError(f"pod UID {pod_uid!r} is not a Kubernetes UID")
    driver_and_uid = DRIVER_NAME.encode() + b"\0" + pod_uid.encode()
    for name in (
        f"{DRIVER_NAME}-{pod_uid}-reg.sock",
        f"{DRIVER_NAME}-{_short(pod_uid.encode(), 8)}-reg.sock",
        f"dra-{_short(driver_and_uid, 16)}-reg.sock",
    ):
        candidate = registry_dir / name
        if len(str(candidate)) <= MAX_UNIX_PATH:
            return candidate
    raise ValueError(f"registry dir {registry_dir} is too long for a unix socket path")


def dra_socket(plugin_dir: Path, pod_uid: str | None = None) -> Path:
    """`<plugins dir>/<driver>/dra.sock`, or `dra-<podUID>.sock` per pod."""
    if pod_uid and not _POD_UID.fullmatch(pod_uid):
        raise ValueError(f"pod UID {pod_uid!r} is not a Kubernetes UID")
    path = data_dir(plugin_dir) / (f"dra-{pod_uid}.sock" if pod_uid else "dra.sock")
    if len(str(path)) > MAX_UNIX_PATH:
        raise ValueError(f"DRA socket path {path} is longer than {MAX_UNIX_PATH} bytes")
    return path


def add_socket_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that locate the plugin's sockets (shared by `plugin` and `plugin-probe`)."""
    add_flag(
        parser,
        "--registry-dir",
        type=Path,
        default=DEFAULT_REGISTRY_DIR,
        help="kubelet plugin registry (registration socket)",
    )
    add_flag(
        parser,
        "--plugin-dir",
        type=Path,
        default=DEFAULT_PLUGIN_DIR,
        help=f"kubelet plugins dir; DRA socket and checkpoint under <dir>/{DRIVER_NAME} (same path in the pod)",
    )
    add_flag(parser, "--pod-uid", help="this pod's UID (downward API): per-pod sockets for seamless rolling updates")
