"""Certificate expiry, made visible while there is time to act: an expired serving certificate or
client CA stops every pod that depends on the extender. A gauge per file (seconds left, always
current at scrape time) for alerts, and a Warning event on the extender's own Pod, where
`kubectl describe` and event-based alerting look, at start and then at most once a day."""

from __future__ import annotations

import datetime as dt
import functools
import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from urllib3.exceptions import HTTPError

from extender.serve.metrics import CERTIFICATE_EXPIRY
from nativedra.base.certs.tls_reload import LoadedTls, TlsFiles
from nativedra.base.kube.events import pod_event
from nativedra.base.kube.names import DRIVER_NAME

log = logging.getLogger(__name__)
REASON = "CertificateExpiringSoon"
COMPONENT = f"{DRIVER_NAME}/extender"
REPEAT_AFTER = dt.timedelta(days=1)
CHECK_EVERY_S = 60.0  # also how soon files rotated while no handshake arrives are reloaded
POST_TIMEOUT_S = 10.0

Clock = Callable[[], dt.datetime]
WarningPoster = Callable[[str], None]  # the message of a CertificateExpiringSoon Warning


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def expiring_soon(now: dt.datetime, not_after: dt.datetime, warning_days: float) -> bool:
    """Within `warning_days` of notAfter, or past it."""
    return not_after - now <= dt.timedelta(days=warning_days)


def _when(now: dt.datetime, not_after: dt.datetime) -> str:
    left = not_after - now
    days = abs(left) / dt.timedelta(days=1)
    at = not_after.strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"expires in {days:.1f} days, at {at}" if left > dt.timedelta(0) else f"expired {days:.1f} days ago, at {at}"


def expiry_warning(loaded: LoadedTls, files: TlsFiles, now: dt.datetime, warning_days: float) -> str | None:
    """What to tell the admin, or None while both files have more than `warning_days` left."""
    parts = [
        f"{what} {path} {_when(now, not_after)}"
        for what, path, not_after in (
            ("the serving certificate", files.cert, loaded.serving_not_after),
            ("a CA in the client CA file", files.client_ca, loaded.client_ca_not_after),
        )
        if expiring_soon(now, not_after, warning_days)
    ]
    if not parts:
        return None
    return f"{'; '.join(parts)}: renew before then, or kube-scheduler cannot reach the extender"


@dataclass(frozen=True)
class PodRef:
    name: str
    namespace: str
    uid: str


def pod_from_env(environ: Mapping[str, str] = os.environ) -> PodRef | None:
    """The extender's own Pod, from the Deployment's downward-API environment."""
    name, namespace = environ.get("NATIVEDRA_POD_NAME", ""), environ.get("NATIVEDRA_POD_NAMESPACE", "")
    if not name or not namespace:
        return None
    return PodRef(name, namespace, environ.get("NATIVEDRA_POD_UID", ""))


def pod_warning(pod: PodRef, message: str, now: dt.datetime) -> dict[str, Any]:
    """A core/v1 Warning Event on the extender's own Pod."""
    metadata = {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}
    return pod_event({"metadata": metadata}, "Warning", REASON, message, component=COMPONENT, now=now)


def api_warning_poster(api: client.ApiClient, pod: PodRef, clock: Clock = utc_now) -> WarningPoster:
    core = client.CoreV1Api(api)

    def post(message: str) -> None:
        core.create_namespaced_event(pod.namespace, pod_warning(pod, message, clock()), _request_timeout=POST_TIMEOUT_S)

    return post


class ExpiryWatch:
    """`loaded` is the TLS reloader's hook (the gauges follow each reload); `check` warns when a
    file is close to expiry, at most once per `repeat_after`; `run` checks until stopped."""

    def __init__(
        self,
        files: TlsFiles,
        warning_days: float,
        post: WarningPoster | None,
        clock: Clock = utc_now,
        repeat_after: dt.timedelta = REPEAT_AFTER,
    ) -> None:
        self.files = files
        self.warning_days = warning_days
        self.post = post
        self.clock = clock
        self.repeat_after = repeat_after
        self._warned_at: dt.datetime | None = None

    def _seconds_left(self, not_after: dt.datetime) -> float:
        return (not_after - self.clock()).total_seconds()

    def loaded(self, loaded: LoadedTls) -> None:
        for label, not_after in (("serving", loaded.serving_not_after), ("client-ca", loaded.client_ca_not_after)):
            CERTIFICATE_EXPIRY.labels(file=label).set_function(functools.partial(self._seconds_left, not_after))

    def check(self, loaded: LoadedTls) -> str | None:
        """The warning given now, if one was due."""
        now = self.clock()
        if self._warned_at is not None and now - self._warned_at < self.repeat_after:
            return None
        message = expiry_warning(loaded, self.files, now, self.warning_days)
        if message is None:
            return None
        self._warned_at = now
        log.warning("%s: %s", REASON, message)
        if self.post is not None:
            try:
                self.post(message)
            except (client.ApiException, HTTPError) as error:
                log.warning("posting the %s event failed: %s", REASON, error)
        return message

    def run(self, current: Callable[[], LoadedTls], stop: threading.Event) -> None:
        """Check now and every CHECK_EVERY_S; `current` (the reloader's refresh) also picks up files
        rotated while no client connected."""
        while True:
            self.check(current())
            if stop.wait(CHECK_EVERY_S):
                return
