"""The node plugin process: discovery + slice publishing, kubelet gRPC, metrics, shutdown."""

from __future__ import annotations

import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from prometheus_client import start_http_server

from dra_driver.background import Activity
from dra_driver.discovery import Backend
from dra_driver.kubelet.checkpoint import Checkpoint, boot_id
from dra_driver.kubelet.claim_api import API_TIMEOUT_S, api_claim_reader, api_claim_sources
from dra_driver.kubelet.device_status import DeviceStatusReports, api_status_applier
from dra_driver.kubelet.events import FailureEvents, api_event_poster, node_warning
from dra_driver.kubelet.fault_events import FaultEvents
from dra_driver.kubelet.grpc_server import HealthServicer, KubeletServers
from dra_driver.kubelet.metadata_store import MetadataStore
from dra_driver.kubelet.prepare import ClaimPreparer, LocalNode, Reporters
from dra_driver.kubelet.repair import reconcile, repair_when_alone
from dra_driver.kubelet.stores import Stores, spec_store
from dra_driver.kubelet_paths import (
    DEFAULT_CDI_DIR,
    DEFAULT_DEV_ROOT,
    DEFAULT_PLUGIN_DIR,
    DEFAULT_REGISTRY_DIR,
    data_dir,
    dra_socket,
    registration_socket,
)
from dra_driver.live_instances import LiveInstances
from dra_driver.publishing.handover import Instance, serving_kubelet
from dra_driver.publishing.node_devices import NodeDevices
from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.publisher import SlicePublisher
from dra_driver.publishing.slice_controller import SliceController
from nativedra.base.kube.bounded import bounded_client
from nativedra.base.kube.client import api_client

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PluginSettings:
    node_name: str
    backend: Backend
    publish: PublishConfig
    kubeconfig: Path | None
    registry_dir: Path = DEFAULT_REGISTRY_DIR
    plugin_dir: Path = DEFAULT_PLUGIN_DIR
    cdi_dir: Path = DEFAULT_CDI_DIR
    dev_root: Path = DEFAULT_DEV_ROOT
    pod_uid: str | None = None
    metrics_address: str = "0.0.0.0"  # noqa: S104 - scraped by Prometheus from outside the pod
    metrics_port: int = 0  # 0: no metrics endpoint
    resync_s: float = 60.0

    @property
    def data_dir(self) -> Path:
        return data_dir(self.plugin_dir)


def _thread(name: str, target: Callable[[threading.Event], None], stop: threading.Event) -> threading.Thread:
    thread = threading.Thread(target=target, args=(stop,), name=name, daemon=True)
    thread.start()
    return thread


def run(settings: PluginSettings, stop: threading.Event | None = None) -> int:
    stop = stop or threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: shutting down", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    if settings.metrics_port:
        start_http_server(settings.metrics_port, settings.metrics_address)
    api = api_client(settings.kubeconfig)
    devices = NodeDevices(settings.backend, settings.publish)
    devices.discover()
    post_event = api_event_poster(bounded_client(api), API_TIMEOUT_S)

    def degraded(message: str) -> None:
        try:
            post_event(*node_warning(settings.node_name, "DeviceFeaturesNotServed", message))
        except Exception as error:  # noqa: BLE001 - the event is for humans; publishing goes on without it
            log.warning("could not post the Node event: %s", error)

    # With a pod UID (per-pod sockets) a newer pod of a rolling update may run beside this one.
    instance = Instance(settings.pod_uid, time.time()) if settings.pod_uid else None
    publisher = SlicePublisher(api, settings.node_name, instance, serving_kubelet(settings.registry_dir))
    controller = SliceController(devices, publisher, resync_s=settings.resync_s, on_degraded=degraded)
    checkpoint = Checkpoint(settings.data_dir / "checkpoint.json", boot_id())
    activity = Activity()
    events = FailureEvents(post_event, settings.node_name, idle_for=activity.idle_for)
    statuses = DeviceStatusReports(
        api_status_applier(bounded_client(api), settings.node_name, API_TIMEOUT_S),
        settings.node_name,
        idle_for=activity.idle_for,
    )
    preparer = ClaimPreparer(
        LocalNode(
            settings.node_name, devices.published, settings.dev_root, mig_supported=settings.backend.can_prepare_mig
        ),
        api_claim_sources(api),
        Stores(checkpoint, spec_store(settings.cdi_dir), MetadataStore(settings.data_dir)),
        Reporters(events.prepare_failed, statuses.prepared, statuses.unprepared),
        activity,
    )
    own_socket = dra_socket(settings.plugin_dir, settings.pod_uid)
    instances = LiveInstances(settings.data_dir, settings.pod_uid or str(uuid.uuid4()), own_socket)
    instances.join()
    if reconcile(preparer, instances.others)["deferred_for"]:
        _thread("repair", lambda until: repair_when_alone(preparer, instances.others, until), stop)
    servers = KubeletServers(
        preparer,
        HealthServicer(settings.node_name, devices.health, devices.changed),
        registration_socket(settings.registry_dir, settings.pod_uid),
        own_socket,
    )
    servers.start()
    publishing = _thread("slices", controller.run, stop)
    _thread("events", events.run, stop)
    faults = FaultEvents(devices, checkpoint.read, api_claim_reader(api), post_event, settings.node_name)
    _thread("fault-events", faults.run, stop)
    reporting = _thread("device-status", statuses.run, stop)
    # Watchers block in long reads; they are daemons and end with the process.
    _thread("slice-watch", controller.watch_slices, stop)
    _thread("discovery-watch", lambda until: settings.backend.watch(until, controller.trigger), stop)
    log.info("node plugin for %s running (backend %s)", settings.node_name, settings.backend.name)
    stop.wait()
    servers.stop()
    with preparer.paused():  # the server's grace may end before a call does: gone only once it has
        instances.leave()
    controller.trigger()
    publishing.join(timeout=5)
    reporting.join(timeout=5)  # it applies the reports still waiting first
    return 0
