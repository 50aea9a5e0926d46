"""The plugin DaemonSet as rendered by kustomize gives the plugin what its code needs on a real
node, and no more: root (the image's default user is the extender's non-root one), the kubelet's
registration directory and its own plugin directory (no other driver's) at the paths the plugin
reports to the kubelet, with no mount propagation, a writable CDI dir, read-only host /dev (beside
the container's own /dev, where the kubelet mounts the termination log), /sys and the driver's
library directory (never the host's /), and probes that call the plugin's sockets."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.kubelet_paths import DEFAULT_CDI_DIR, DEFAULT_PLUGIN_DIR, DEFAULT_REGISTRY_DIR, data_dir
from nativedra.base.kube.names import GPU_NODE_LABEL

REPO = Path(__file__).resolve().parents[2]
DRIVER_ROOT = "/driver-root"
HOST_DEV = "/host-dev"


def _rendered_daemonset() -> dict[str, Any]:
    kubectl = shutil.which("kubectl") or str(Path(sys.executable).parent / "kubectl")
    output = subprocess.run(
        [kubectl, "kustomize", str(REPO / "manifests" / "base")], capture_output=True, text=True, check=True
    ).stdout
    (daemonset,) = [d for d in yaml.safe_load_all(output) if d and d["kind"] == "DaemonSet"]
    return dict(daemonset)


@pytest.fixture(scope="module")
def pod_spec() -> dict[str, Any]:
    return dict(_rendered_daemonset()["spec"]["template"]["spec"])


def _mounts(pod_spec: dict[str, Any]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """mountPath -> (volumeMount, volume)."""
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    container = pod_spec["containers"][0]
    return {m["mountPath"]: (m, volumes[m["name"]]) for m in container["volumeMounts"]}


def test_the_plugin_runs_as_root_with_privileges(pod_spec: dict[str, Any]) -> None:
    dockerfile_users = [
        line.split()[1] for line in (REPO / "Dockerfile").read_text().splitlines() if line.startswith("USER ")
    ]
    assert dockerfile_users and dockerfile_users[-1].split(":")[0] != "0", "the image's default user is non-root"
    context = pod_spec["containers"][0]["securityContext"]
    pod_context = pod_spec.get("securityContext") or {}
    assert context.get("runAsUser", pod_context.get("runAsUser")) == 0, (
        "a non-root user has no effective capabilities even when privileged: sockets under "
        f"{DEFAULT_PLUGIN_DIR} could not be created"
    )
    assert context.get("privileged") is True
    assert context.get("readOnlyRootFilesystem") is True


def test_the_plugin_runs_on_the_nodes_labelled_for_it(pod_spec: dict[str, Any]) -> None:
    assert pod_spec["nodeSelector"] == {GPU_NODE_LABEL: "true"}, "the local real node sets this label"


def test_kubelet_dirs_are_mounted_at_the_paths_the_plugin_reports(pod_spec: dict[str, Any]) -> None:
    mounts = _mounts(pod_spec)
    for path in (DEFAULT_REGISTRY_DIR, data_dir(DEFAULT_PLUGIN_DIR), DEFAULT_CDI_DIR):
        mount, volume = mounts[str(path)]
        assert volume["hostPath"]["path"] == str(path), f"{path} must be the same path inside and outside"
        assert not mount.get("readOnly"), f"the plugin writes under {path}"
    assert str(DEFAULT_PLUGIN_DIR) not in mounts, "other drivers' and CSI plugins' sockets are not the plugin's"
    assert all(mount.get("mountPropagation", "HostToContainer") == "HostToContainer" for mount, _ in mounts.values())


def test_host_devices_and_driver_root_are_read_only(pod_spec: dict[str, Any]) -> None:
    mounts = _mounts(pod_spec)
    for path in (HOST_DEV, "/sys", DRIVER_ROOT):
        mount, volume = mounts[path]
        assert mount.get("readOnly") is True, f"{path} must be read-only"
        assert "hostPath" in volume
    assert "/dev" not in mounts, "a read-only /dev leaves runc no place for /dev/termination-log"
    assert mounts[DRIVER_ROOT][1]["hostPath"]["path"] != "/", "the host's / holds the kubelet's credentials"
    env = {e["name"]: e.get("value") for e in pod_spec["containers"][0]["env"]}
    assert env["NATIVEDRA_DRIVER_ROOT"] == DRIVER_ROOT
    assert env["NATIVEDRA_DEV_ROOT"] == HOST_DEV
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert "/tmp" in mounts, "a read-only root file system still needs a writable /tmp"


def test_probes_call_the_plugin_sockets(pod_spec: dict[str, Any]) -> None:
    container = pod_spec["containers"][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["exec"]["command"] == ["nativedra", "plugin-probe"]
        # A Python process: the default 1 s timed out on a busy node, and the kubelet restarted a
        # healthy plugin whose startup probe failed 24 times in a row.
        assert container[probe].get("timeoutSeconds", 1) >= 5, probe
