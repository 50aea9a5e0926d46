"""The real node's configuration (pure builders), its credentials, the image's source digest and
the partial stop `cluster down` uses before containerd goes."""

from __future__ import annotations

import os
import stat
import sys
import tomllib
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from dra_driver.kubelet_paths import DEFAULT_CDI_DIR
from nativedra.cluster import pki
from nativedra.cluster.image import source_digest
from nativedra.cluster.node_runtime import NodeRuntime
from nativedra.cluster.processes import Supervisor, running, stop_recorded
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


def test_a_node_client_certificate_names_the_node_in_system_nodes(tmp_path: Path) -> None:
    material = pki.create(tmp_path / "pki")
    cert_path, key_path = pki.node_client(material, "real-0", tmp_path / "node")
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:real-0"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    ca = x509.load_pem_x509_certificate(material.ca_cert.read_bytes())
    cert.verify_directly_issued_by(ca)
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600


def test_the_image_digest_follows_the_copied_sources_only(tmp_path: Path) -> None:
    (tmp_path / "extender").mkdir()
    (tmp_path / "extender" / "app.py").write_text("one")
    (tmp_path / "Dockerfile").write_text("FROM x")
    first = source_digest(tmp_path)
    (tmp_path / "extender" / "__pycache__").mkdir()
    (tmp_path / "extender" / "__pycache__" / "app.pyc").write_bytes(b"\0")
    (tmp_path / "notes.txt").write_text("not copied into the image")
    assert source_digest(tmp_path) == first
    (tmp_path / "extender" / "app.py").write_text("two")
    assert source_digest(tmp_path) != first


def test_stop_recorded_can_stop_one_process_and_keep_the_record(tmp_path: Path) -> None:
    """`cluster down` stops the kubelet, then the containers, then containerd: one at a time."""
    (tmp_path / "logs").mkdir()
    supervisor = Supervisor(tmp_path, lambda: {}, tie_to_parent=True)
    first = supervisor.spawn("first", Path(sys.executable), ["-c", "import time; time.sleep(60)"])
    second = supervisor.spawn("second", Path(sys.executable), ["-c", "import time; time.sleep(60)"])
    try:
        assert stop_recorded(tmp_path, only="second") == ["second"]
        assert running(first) and not running(second)
        assert stop_recorded(tmp_path) == ["first"]
        assert not running(first)
    finally:
        supervisor.stop()
