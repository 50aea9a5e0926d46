"""What the kubelet does at the end of a graceful deletion, for nodes that have no kubelet.

Simulated nodes (Node objects and slices published with the plugin's builder) run no kubelet, so
a pod deleted with a grace period stays Terminating for ever. The kubelet, once the pod's
containers have stopped, confirms the deletion (grace period 0). This does that for pods of one
namespace `after_s` seconds after their deletion began: the window in which their devices are still
allocated, as on a real node while containers shut down. The real node test (e2e/test_real_node.py)
runs the real kubelet instead.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
from types import TracebackType

from kubernetes import client

POLL_S = 0.2


class PodReaper:
    def __init__(self, api: client.ApiClient, namespace: str, after_s: float) -> None:
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.after_s = after_s
        self.reaped: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-reaper", daemon=True)

    def __enter__(self) -> PodReaper:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            now = dt.datetime.now(dt.UTC)
            with contextlib.suppress(client.ApiException):
                for pod in self.core.list_namespaced_pod(self.namespace).items:
                    deleted_at = pod.metadata.deletion_timestamp
                    grace = pod.metadata.deletion_grace_period_seconds or 0
                    if deleted_at is None or not pod.spec.node_name:
                        continue
                    began = deleted_at - dt.timedelta(seconds=grace)  # deletionTimestamp is its deadline
                    if (now - began).total_seconds() >= self.after_s:
                        with contextlib.suppress(client.ApiException):
                            self.core.delete_namespaced_pod(pod.metadata.name, self.namespace, grace_period_seconds=0)
                            self.reaped.append(pod.metadata.name)
