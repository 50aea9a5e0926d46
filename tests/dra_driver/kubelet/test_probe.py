"""`nativedra plugin-probe` passes only when both kubelet sockets answer as the kubelet needs:
the registration names the DRA socket the probe was given, and the DRA service serves."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from dra_driver.kubelet.grpc_server import ClaimPool, DraServicer, RegistrationServicer
from dra_driver.kubelet.probe import probe
from dra_driver.proto.gen.dra.v1 import api_pb2 as dra_v1
from dra_driver.proto.gen.dra.v1 import api_pb2_grpc as dra_v1_grpc
from dra_driver.proto.gen.pluginregistration.v1 import api_pb2_grpc as registration_grpc
from tests.dra_driver.claims import Node


@pytest.fixture
def sockets() -> Iterator[Path]:
    """A short directory: a unix socket path must fit in 108 bytes."""
    with tempfile.TemporaryDirectory(prefix="probe-") as directory:
        yield Path(directory)


def _serve(registration: Path, endpoint: Path, dra: Path | None, node: Node) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    registration_grpc.add_RegistrationServicer_to_server(RegistrationServicer(endpoint), server)
    server.add_insecure_port(f"unix://{registration}")
    if dra is not None:
        dra_server = DraServicer(node.preparer(), dra_v1, ClaimPool(workers=1))
        dra_v1_grpc.add_DRAPluginServicer_to_server(dra_server, server)
        server.add_insecure_port(f"unix://{dra}")
    server.start()
    return server


def test_a_plugin_serving_both_sockets_is_healthy(sockets: Path, node: Node) -> None:
    registration, dra = sockets / "reg.sock", sockets / "dra.sock"
    server = _serve(registration, dra, dra, node)
    try:
        assert probe(registration, dra, timeout_s=5) is None
    finally:
        server.stop(None)


def test_a_registration_naming_another_socket_is_unhealthy(sockets: Path, node: Node) -> None:
    registration, dra, elsewhere = sockets / "reg.sock", sockets / "dra.sock", sockets / "old.sock"
    server = _serve(registration, elsewhere, dra, node)
    try:
        assert probe(registration, dra, timeout_s=5) == f"registration reports endpoint {elsewhere}, expected {dra}"
    finally:
        server.stop(None)


def test_a_dra_socket_that_does_not_answer_is_unhealthy(sockets: Path, node: Node) -> None:
    registration, dra = sockets / "reg.sock", sockets / "dra.sock"
    server = _serve(registration, dra, None, node)
    try:
        problem = probe(registration, dra, timeout_s=2)
    finally:
        server.stop(None)
    assert problem is not None and problem.startswith("UNAVAILABLE: ")


def test_nothing_listening_is_unhealthy(sockets: Path) -> None:
    problem = probe(sockets / "reg.sock", sockets / "dra.sock", timeout_s=2)
    assert problem is not None and problem.startswith("UNAVAILABLE: ")
