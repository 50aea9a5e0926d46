"""The kubelet-facing gRPC services: registration, DRA v1 + v1beta1, and the health stream."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import grpc

from dra_driver.errors import PrepareError
from dra_driver.kubelet.claim import ClaimRef, PreparedDevice
from dra_driver.kubelet.prepare import ClaimPreparer
from dra_driver.proto.gen.dra.v1 import api_pb2 as dra_v1
from dra_driver.proto.gen.dra.v1 import api_pb2_grpc as dra_v1_grpc
from dra_driver.proto.gen.dra.v1beta1 import api_pb2 as dra_v1beta1
from dra_driver.proto.gen.dra.v1beta1 import api_pb2_grpc as dra_v1beta1_grpc
from dra_driver.proto.gen.dra_health.v1 import api_pb2 as health_v1
from dra_driver.proto.gen.dra_health.v1 import api_pb2_grpc as health_v1_grpc
from dra_driver.proto.gen.dra_health.v1alpha1 import api_pb2 as health_v1alpha1
from dra_driver.proto.gen.dra_health.v1alpha1 import api_pb2_grpc as health_v1alpha1_grpc
from dra_driver.proto.gen.pluginregistration.v1 import api_pb2 as registration_pb
from dra_driver.proto.gen.pluginregistration.v1 import api_pb2_grpc as registration_grpc
from nativedra.base.kube.names import DRIVER_NAME

log = logging.getLogger(__name__)
# The kubelet takes the first DRAPlugin service it knows; from 1.37 it opens the health stream only
# with a DRAResourceHealth service named here (older kubelets ignore the names they do not know).
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
SOCKET_MODE = 0o600  # only root (the kubelet) may connect
HEALTH_TIMEOUT_S = 60


class RegistrationServicer(registration_grpc.RegistrationServicer):  # type: ignore[misc]
    def __init__(self, endpoint: Path) -> None:
        self.endpoint = endpoint

    def GetInfo(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 - gRPC method names
        return registration_pb.PluginInfo(
            type="DRAPlugin", name=DRIVER_NAME, endpoint=str(self.endpoint), supported_versions=list(SUPPORTED_VERSIONS)
        )

    def NotifyRegistrationStatus(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        if request.plugin_registered:
            log.info("registered with the kubelet")
        else:
            log.error("the kubelet rejected the registration: %s", request.error)
        return registration_pb.RegistrationStatusResponse()


def unique_claims(claims: Iterable[Any]) -> list[ClaimRef]:
    """One entry per claim UID: the response is keyed by UID, so a claim named twice in one call is
    prepared once and its devices are listed once (the first namespace/name given wins)."""
    unique: dict[str, ClaimRef] = {}
    for claim in claims:
        unique.setdefault(claim.uid, ClaimRef(claim.namespace, claim.uid, claim.name))
    return list(unique.values())


R = TypeVar("R")
CLAIM_WORKERS = 8  # claims of one kubelet call prepared side by side, over all calls at once


class ClaimPool:
    """Runs the claims of one kubelet call side by side (a pod with several claims waits for the
    slowest, not the sum), at most `workers` at once over all calls. Submitting waits while
    `workers` claims are queued, so the executor's queue stays bounded. A call with one claim runs
    on the gRPC thread that received it."""

    def __init__(self, workers: int = CLAIM_WORKERS) -> None:
        self._executor = futures.ThreadPoolExecutor(workers, thread_name_prefix="claim")
        self._slots = threading.BoundedSemaphore(2 * workers)  # running + queued

    def map(self, action: Callable[[ClaimRef], R], refs: list[ClaimRef]) -> list[R]:
        if len(refs) == 1:
            return [action(refs[0])]
        submitted = []
        for ref in refs:
            self._slots.acquire()
            future = self._executor.submit(action, ref)
            future.add_done_callback(lambda _: self._slots.release())
            submitted.append(future)
        return [future.result() for future in submitted]

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)


class DraServicer:
    """One implementation for both API versions; `messages` is the version's generated module."""

    def __init__(self, preparer: ClaimPreparer, messages: ModuleType, pool: ClaimPool) -> None:
        self.preparer = preparer
        self.messages = messages
        self.pool = pool
        self.with_share_id = messages is dra_v1

    def _device(self, prepared: PreparedDevice) -> Any:
        device = self.messages.Device(
            request_names=prepared.request_names,
            pool_name=prepared.pool_name,
            device_name=prepared.device_name,
            cdi_device_ids=prepared.cdi_device_ids,
        )
        if self.with_share_id and prepared.share_id:
            device.share_id = prepared.share_id
        return device

    @staticmethod
    def _outcome(operation: str, action: Callable[[ClaimRef], R]) -> Callable[[ClaimRef], R | str]:
        """`action` whose failure becomes the error text of its claim's entry: one claim's failure
        (or bug) must not fail the others."""

        def run(ref: ClaimRef) -> R | str:
            try:
                return action(ref)
            except PrepareError as error:
                return str(error)
            except Exception as error:
                log.exception("%s %s", operation, ref)
                return f"claim {ref}: internal error: {error}"

        return run

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        response = self.messages.NodePrepareResourcesResponse()
        refs = unique_claims(request.claims)  # every claim gets an entry
        outcomes = self.pool.map(self._outcome("prepare", self.preparer.prepare), refs)
        for ref, outcome in zip(refs, outcomes, strict=True):
            entry = response.claims[ref.uid]
            if isinstance(outcome, str):
                entry.error = outcome
            else:
                entry.devices.extend(self._device(d) for d in outcome)
        return response

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        response = self.messages.NodeUnprepareResourcesResponse()
        refs = unique_claims(request.claims)
        outcomes = self.pool.map(self._outcome("unprepare", self.preparer.unprepare), refs)
        for ref, outcome in zip(refs, outcomes, strict=True):
            entry = response.claims[ref.uid]
            if isinstance(outcome, str):
                entry.error = outcome
        return response


class HealthServicer:
    """Streams the complete device list whenever any device's health changes, in the messages of
    one health API version (v1 and v1alpha1 carry the same fields)."""

    def __init__(
        self,
        node_name: str,
        snapshot: Callable[[], dict[str, str]],
        changed: threading.Condition,
        messages: ModuleType = health_v1,
    ):
        self.node_name = node_name
        self.snapshot = snapshot  # -> {device name: "Healthy" | "Unhealthy"}
        self.changed = changed
        self.messages = messages

    def in_version(self, messages: ModuleType) -> HealthServicer:
        return HealthServicer(self.node_name, self.snapshot, self.changed, messages)

    def _message(self, health: dict[str, str]) -> Any:
        now = int(time.time())
        pb = self.messages
        return pb.NodeWatchResourcesResponse(
            devices=[
                pb.DeviceHealth(
                    device=pb.DeviceIdentifier(pool_name=self.node_name, device_name=name),
                    health=pb.HEALTHY if state == "Healthy" else pb.UNHEALTHY,
                    last_updated_time=now,
                    health_check_timeout_seconds=HEALTH_TIMEOUT_S,
                    message="" if state == "Healthy" else f"{name}: GPU reported unhealthy by the {DRIVER_NAME} plugin",
                )
                for name, state in sorted(health.items())
            ]
        )

    def NodeWatchResources(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:  # noqa: N802
        yield self._message(self.snapshot())
        while context.is_active():
            with self.changed:  # woken by a health change; the timeout refreshes the kubelet's view
                self.changed.wait(timeout=HEALTH_TIMEOUT_S / 2)
            yield self._message(self.snapshot())


def _add_dra_services(server: grpc.Server, preparer: ClaimPreparer, pool: ClaimPool) -> None:
    dra_v1_grpc.add_DRAPluginServicer_to_server(DraServicer(preparer, dra_v1, pool), server)
    dra_v1beta1_grpc.add_DRAPluginServicer_to_server(DraServicer(preparer, dra_v1beta1, pool), server)


def _listen(server: grpc.Server, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a stale socket from a previous run
    server.add_insecure_port(f"unix://{path}")


class KubeletServers:
    """DRA server first, registration socket second (the kubelet may call at once)."""

    def __init__(
        self,
        preparer: ClaimPreparer,
        health: HealthServicer,
        registration_path: Path,
        dra_path: Path,
        workers: int = 16,
    ) -> None:
        self.registration_path = registration_path
        self.dra_path = dra_path
        self.registration = RegistrationServicer(dra_path)
        self.dra_server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
        self.claim_pool = ClaimPool()
        _add_dra_services(self.dra_server, preparer, self.claim_pool)
        health_v1_grpc.add_DRAResourceHealthServicer_to_server(health.in_version(health_v1), self.dra_server)
        health_v1alpha1_grpc.add_DRAResourceHealthServicer_to_server(
            health.in_version(health_v1alpha1), self.dra_server
        )
        self.registration_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        registration_grpc.add_RegistrationServicer_to_server(self.registration, self.registration_server)

    def start(self) -> None:
        _listen(self.dra_server, self.dra_path)
        self.dra_server.start()
        self.dra_path.chmod(SOCKET_MODE)
        _listen(self.registration_server, self.registration_path)
        self.registration_server.start()
        self.registration_path.chmod(SOCKET_MODE)
        log.info("serving DRA on %s, registration on %s", self.dra_path, self.registration_path)

    def stop(self) -> None:
        """Unregister first (socket gone), then stop serving; our sockets only."""
        self.registration_server.stop(grace=1).wait()
        with contextlib.suppress(FileNotFoundError):
            self.registration_path.unlink()
        self.dra_server.stop(grace=5).wait()
        self.claim_pool.shutdown()
        with contextlib.suppress(FileNotFoundError):
            self.dra_path.unlink()
