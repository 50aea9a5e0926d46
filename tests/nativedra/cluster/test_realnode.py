"""The real node's configuration: pure builders for containerd, the kubelet, CNI and the fake /dev tree."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path

import pytest

from dra_driver.kubelet_paths import DEFAULT_CDI_DIR
from nativedra.cluster.node_runtime import NodeRuntime
from nativedra.cluster.realnode import (
    NVIDIA_MAJOR,
    NVIDIACTL_MINOR,
    cni_config,
    containerd_config,
    fake_dev_tree,
    kubelet_config,
)

RUNTIME = NodeRuntime(Path("/opt/ctd/bin"), runc=Path("/usr/sbin/runc"), cni_bin_dir=Path("/usr/lib/cni"))


def test_containerd_config_serves_cri_with_cdi_on_runc_from_the_node_dir(tmp_path: Path) -> None:
    config = tomllib.loads(containerd_config(tmp_path, RUNTIME, "localhost/pause:1"))
    assert config["version"] == 4
    assert config["root"].startswith(str(tmp_path)) and config["state"].startswith(str(tmp_path))
    plugins = config["plugins"]
    socket = plugins["io.containerd.server.v1.grpc"]["address"]
    assert socket.startswith(str(tmp_path)) and len(socket) < 108, "a unix socket path must fit sun_path"
    runtime = plugins["io.containerd.cri.v1.runtime"]
    assert runtime["cdi_spec_dirs"] == [str(DEFAULT_CDI_DIR)], "the runtime reads the specs the plugin writes"
    assert runtime["restrict_oom_score_adj"] is True, "a negative oom_score_adj needs CAP_SYS_RESOURCE"
    runc = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert runc == {"BinaryName": "/usr/sbin/runc", "SystemdCgroup": False}
    assert plugins["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == "localhost/pause:1"
    assert runtime["cni"]["conf_dir"].startswith(str(tmp_path))


def test_kubelet_config_for_a_hybrid_cgroup_machine_with_only_the_apiserver_as_client(tmp_path: Path) -> None:
    config = kubelet_config(tmp_path, "192.0.2.7", {"kubelet": 1, "kubelet_healthz": 2}, tmp_path / "ca.crt", {})
    assert config["address"] == "192.0.2.7" and config["healthzBindAddress"] == "127.0.0.1"
    assert config["readOnlyPort"] == 0
    assert config["authentication"]["anonymous"] == {"enabled": False}
    assert config["authentication"]["x509"] == {"clientCAFile": str(tmp_path / "ca.crt")}
    assert config["failCgroupV1"] is False and config["cgroupDriver"] == "cgroupfs"
    assert config["containerRuntimeEndpoint"] == config["imageServiceEndpoint"]
    assert config["containerRuntimeEndpoint"].startswith(f"unix://{tmp_path}")
    assert config["featureGates"] == {}, "users run default gates; so does the real node"


def test_cni_config_keeps_its_ip_leases_in_the_node_dir(tmp_path: Path) -> None:
    (bridge,) = cni_config(tmp_path)["plugins"]
    assert bridge["type"] == "bridge" and bridge["isGateway"] is True
    assert bridge["ipam"]["dataDir"].startswith(str(tmp_path))


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of character devices needs root")
def test_fake_dev_tree_has_nvidia_character_devices(tmp_path: Path) -> None:
    fake_dev_tree(tmp_path, [0, 3])
    fake_dev_tree(tmp_path, [0, 3])  # again: replaces, does not fail
    found = {p.name: p.stat() for p in tmp_path.iterdir()}
    assert set(found) == {"nvidia0", "nvidia3", "nvidiactl"}
    assert all(stat.S_ISCHR(info.st_mode) for info in found.values())
    assert {name: (os.major(i.st_rdev), os.minor(i.st_rdev)) for name, i in found.items()} == {
        "nvidia0": (NVIDIA_MAJOR, 0),
        "nvidia3": (NVIDIA_MAJOR, 3),
        "nvidiactl": (NVIDIA_MAJOR, NVIDIACTL_MINOR),
    }
