"""Play the kubelet: the plugin registration handshake, DRA calls and the health stream over the
plugin's real unix sockets, with stubs generated from the in-tree protos."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

from dra_driver.proto.gen.dra.v1 import api_pb2 as dra_v1
from dra_driver.proto.gen.dra.v1 import api_pb2_grpc as dra_v1_grpc
from dra_driver.proto.gen.dra.v1beta1 import api_pb2 as dra_v1beta1
from dra_driver.proto.gen.dra.v1beta1 import api_pb2_grpc as dra_v1beta1_grpc
from dra_driver.proto.gen.dra_health.v1alpha1 import api_pb2 as health_pb
from dra_driver.proto.gen.dra_health.v1alpha1 import api_pb2_grpc as health_grpc
from dra_driver.proto.gen.pluginregistration.v1 import api_pb2 as registration_pb
from dra_driver.proto.gen.pluginregistration.v1 import api_pb2_grpc as registration_grpc

KUBELET_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")  # what a 1.34+ kubelet knows
VERSIONS = {"v1": (dra_v1, dra_v1_grpc), "v1beta1": (dra_v1beta1, dra_v1beta1_grpc)}


def register(registration_socket: Path) -> Any:
    """GetInfo + NotifyRegistrationStatus as the kubelet's plugin watcher does; returns the info."""
    with grpc.insecure_channel(f"unix://{registration_socket}") as channel:
        stub = registration_grpc.RegistrationStub(channel)
        info = stub.GetInfo(registration_pb.InfoRequest(), timeout=10)
        chosen = next((v for v in info.supported_versions if v in KUBELET_SERVICES), None)
        error = "" if chosen else f"none of {list(info.supported_versions)} is supported"
        stub.NotifyRegistrationStatus(
            registration_pb.RegistrationStatus(plugin_registered=chosen is not None, error=error), timeout=10
        )
        return info


def plugin_info(registration_socket: Path) -> Any | None:
    """GetInfo alone (the kubelet's periodic probe); None when nothing answers."""
    if not registration_socket.exists():
        return None
    try:
        with grpc.insecure_channel(f"unix://{registration_socket}") as channel:
            return registration_grpc.RegistrationStub(channel).GetInfo(registration_pb.InfoRequest(), timeout=2)
    except grpc.RpcError:
        return None


def prepare(dra_socket: Path, version: str, claims: list[tuple[str, str, str]], timeout: float = 45) -> Any:
    messages, stubs = VERSIONS[version]
    with grpc.insecure_channel(f"unix://{dra_socket}") as channel:
        request = messages.NodePrepareResourcesRequest(
            claims=[messages.Claim(namespace=n, uid=u, name=c) for n, u, c in claims]
        )
        return stubs.DRAPluginStub(channel).NodePrepareResources(request, timeout=timeout)


def unprepare(dra_socket: Path, version: str, claims: list[tuple[str, str, str]], timeout: float = 45) -> Any:
    messages, stubs = VERSIONS[version]
    with grpc.insecure_channel(f"unix://{dra_socket}") as channel:
        request = messages.NodeUnprepareResourcesRequest(
            claims=[messages.Claim(namespace=n, uid=u, name=c) for n, u, c in claims]
        )
        return stubs.DRAPluginStub(channel).NodeUnprepareResources(request, timeout=timeout)


def health_stream(dra_socket: Path) -> tuple[grpc.Channel, Iterator[Any]]:
    channel = grpc.insecure_channel(f"unix://{dra_socket}")
    stream = health_grpc.DRAResourceHealthStub(channel).NodeWatchResources(health_pb.NodeWatchResourcesRequest())
    return channel, stream


UNHEALTHY = health_pb.UNHEALTHY
HEALTHY = health_pb.HEALTHY


def make_dev_tree(root: Path, nvidia_minors: range, amd_render_minors: tuple[int, ...] = ()) -> Path:
    """A fake host /dev with real character devices (NVIDIA major 195, uvm 511, DRM 226)."""
    root.mkdir(parents=True, exist_ok=True)

    def node(path: str, major: int, minor: int) -> None:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(target, 0o666 | stat.S_IFCHR, os.makedev(major, minor))

    for minor in nvidia_minors:
        node(f"nvidia{minor}", 195, minor)
    node("nvidiactl", 195, 255)
    node("nvidia-uvm", 511, 0)
    node("nvidia-uvm-tools", 511, 1)
    for minor in amd_render_minors:
        node(f"dri/renderD{minor}", 226, minor)
    if amd_render_minors:
        node("kfd", 238, 0)
    return root
