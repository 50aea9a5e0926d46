"""`nativedra plugin-probe`: is the plugin serving the kubelet? (startup and liveness probe)

Calls GetInfo on the registration socket and an empty NodePrepareResources on the DRA socket,
exactly what the kubelet relies on; exit 0 only if both answer.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grpc

from dra_driver.kubelet_paths import add_socket_flags, dra_socket, registration_socket
from dra_driver.proto.gen.dra.v1 import api_pb2 as dra_v1
from dra_driver.proto.gen.dra.v1 import api_pb2_grpc as dra_v1_grpc
from dra_driver.proto.gen.pluginregistration.v1 import api_pb2 as registration_pb
from dra_driver.proto.gen.pluginregistration.v1 import api_pb2_grpc as registration_grpc


def probe(registration: Path, dra: Path, timeout_s: float = 5) -> str | None:
    """None when healthy, else what is wrong."""
    try:
        with grpc.insecure_channel(f"unix://{registration}") as channel:
            info = registration_grpc.RegistrationStub(channel).GetInfo(registration_pb.InfoRequest(), timeout=timeout_s)
        with grpc.insecure_channel(f"unix://{dra}") as channel:
            dra_v1_grpc.DRAPluginStub(channel).NodePrepareResources(
                dra_v1.NodePrepareResourcesRequest(), timeout=timeout_s
            )
    except grpc.RpcError as error:
        return f"{error.code().name}: {error.details()}"
    if info.endpoint != str(dra):
        return f"registration reports endpoint {info.endpoint}, expected {dra}"
    return None


def _run(args: argparse.Namespace) -> int:
    problem = probe(
        registration_socket(args.registry_dir, args.pod_uid or None), dra_socket(args.plugin_dir, args.pod_uid or None)
    )
    if problem:
        print(f"nativedra plugin-probe: {problem}", file=sys.stderr)
        return 1
    return 0


def register(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subcommands.add_parser("plugin-probe", help="exit 0 if the node plugin answers on both kubelet sockets")
    add_socket_flags(parser)
    parser.set_defaults(handler=_run)
