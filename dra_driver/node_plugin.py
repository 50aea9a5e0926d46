"""The node plugin process: discovery + slice publishing (+ kubelet gRPC), metrics, shutdown."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from prometheus_client import start_http_server

from dra_driver.discovery import Backend
from dra_driver.publish_config import PublishConfig
from dra_driver.publisher import SlicePublisher
from dra_driver.slice_controller import SliceController
from nativedra.kube import api_client

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PluginSettings:
    node_name: str
    backend: Backend
    publish: PublishConfig
    kubeconfig: Path | None
    metrics_address: str = "0.0.0.0"  # noqa: S104 - scraped by Prometheus from outside the pod
    metrics_port: int = 0  # 0: no metrics endpoint
    resync_s: float = 60.0


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
    publisher = SlicePublisher(api_client(settings.kubeconfig), settings.node_name)
    controller = SliceController(settings.backend, publisher, settings.publish, resync_s=settings.resync_s)
    publishing = _thread("slices", controller.run, stop)
    # Watchers block in long reads; they are daemons and end with the process.
    _thread("slice-watch", controller.watch_slices, stop)
    _thread("discovery-watch", controller.watch_backend, stop)
    log.info("node plugin for %s running (backend %s)", settings.node_name, settings.backend.name)
    stop.wait()
    controller.trigger()
    publishing.join(timeout=5)
    return 0
