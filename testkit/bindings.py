"""When each pod of a namespace was first seen bound, and where: the clock of every scheduling
benchmark and comparison, read from a watch (not from polling, which would round every figure
to the polling period)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Set
from typing import Any

from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

WATCH_S = 30  # one watch request's server-side timeout; the watch is re-opened until stopped
# Watch errors that a new list and watch cure: 410 Gone (resourceVersion compacted away) and 504
# (the watch cache has not yet reached the resourceVersion the list returned).
RESUMABLE = (410, 504)


class Bindings:
    """When each pod of one namespace was first seen bound, and where, from a watch."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.at: dict[str, float] = {}
        self.node: dict[str, str] = {}
        self._changed = threading.Condition()
        self._stopped = threading.Event()
        self._response: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{namespace}", daemon=True)

    def __enter__(self) -> Bindings:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stopped.set()
        response = self._response
        if response is not None:
            # Ends the reader's blocking read now, not at WATCH_S: closing the response from this
            # thread does not wake a read blocked in another; shutting its socket down does.
            sock = getattr(getattr(response, "connection", None), "sock", None)
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            response.close()
        self._thread.join(WATCH_S + 5)

    def wait(self, names: Set[str], timeout_s: float) -> None:
        """Until every pod of `names` is bound or `timeout_s` passes; a failed watch is raised."""
        with self._changed:
            self._changed.wait_for(lambda: self._error is not None or self.at.keys() >= names, max(timeout_s, 0))
        if self._error is not None:
            raise RuntimeError(f"the pod watch on {self.namespace} failed") from self._error

    def snapshot(self) -> tuple[dict[str, float], dict[str, str]]:
        """Copies of pod -> bind time and pod -> node, consistent with each other."""
        with self._changed:
            return dict(self.at), dict(self.node)

    def _run(self) -> None:
        try:
            version = ""
            while not self._stopped.is_set():
                if not version:  # list, then watch from there (the namespace is new: a small list)
                    listed = self.core.list_namespaced_pod(self.namespace)
                    for pod in listed.items:
                        self._seen(pod.metadata.name, pod.spec.node_name)
                    version = listed.metadata.resource_version
                self._response = self.core.list_namespaced_pod(
                    self.namespace,
                    watch=True,
                    resource_version=version,
                    timeout_seconds=WATCH_S,
                    _preload_content=False,
                )
                # Line by line as chunks arrive: iterating the response itself waits for 64 KiB.
                for line in iter_resp_lines(self._response):
                    version = self._event(json.loads(line)) if line else version
        except Exception as error:  # noqa: BLE001 - handed to the waiting thread
            if not self._stopped.is_set():
                with self._changed:
                    self._error = error
                    self._changed.notify_all()

    def _event(self, event: dict[str, Any]) -> str:
        """The resourceVersion to resume from; "" to list again after a watch error that says so."""
        obj = event["object"]
        if event["type"] == "ERROR":
            if obj.get("code") not in RESUMABLE:
                raise RuntimeError(f"pod watch: {obj.get('message')}")
            time.sleep(1)  # both codes ask for a pause before the next try
            return ""
        self._seen(obj["metadata"]["name"], obj["spec"].get("nodeName"))
        return str(obj["metadata"]["resourceVersion"])

    def _seen(self, name: str, node: str | None) -> None:
        if node and name not in self.at:
            with self._changed:
                self.at[name] = time.perf_counter()
                self.node[name] = node
                self._changed.notify_all()
