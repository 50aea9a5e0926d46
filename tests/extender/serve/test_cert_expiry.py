"""Certificate expiry is visible before it is an outage: the gauge reads seconds left for each file
and follows reloads; a Warning goes on the extender's Pod within the warning days, at most once a
day, and a failed post costs nothing but a log line."""

from __future__ import annotations

import argparse
import datetime as dt
import ssl
import threading
from pathlib import Path

import pytest
from kubernetes import client
from prometheus_client import REGISTRY

from extender import cli
from extender.serve.cert_expiry import (
    REASON,
    ExpiryWatch,
    PodRef,
    expiring_soon,
    expiry_warning,
    pod_from_env,
    pod_warning,
)
from nativedra.base.certs.tls_reload import LoadedTls, ReloadingTls, TlsFiles
from nativedra.cluster.pki import extender_tls

NOW = dt.datetime(2026, 6, 1, 12, tzinfo=dt.UTC)
FILES = TlsFiles(Path("/tls/tls.crt"), Path("/tls/tls.key"), Path("/tls/ca.crt"))
DAY = dt.timedelta(days=1)


def _loaded(serving_days: float, ca_days: float) -> LoadedTls:
    return LoadedTls(
        context=ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER),
        serving_not_after=NOW + serving_days * DAY,
        client_ca_not_after=NOW + ca_days * DAY,
        serving_serial=1,
    )


def _gauge(file: str) -> float | None:
    return REGISTRY.get_sample_value("nativedra_extender_certificate_expiry_seconds", {"file": file})


@pytest.mark.parametrize(
    ("left", "warn"),
    [(dt.timedelta(days=30, seconds=1), False), (dt.timedelta(days=30), True), (DAY, True), (-DAY, True)],
)
def test_the_warning_starts_at_the_warning_days_and_stays_past_expiry(left: dt.timedelta, warn: bool) -> None:
    assert expiring_soon(NOW, NOW + left, 30) is warn


def test_the_warning_names_each_file_close_to_expiry_and_only_those() -> None:
    assert expiry_warning(_loaded(31, 400), FILES, NOW, 30) is None
    serving_only = expiry_warning(_loaded(12, 400), FILES, NOW, 30)
    assert serving_only is not None
    assert "the serving certificate /tls/tls.crt expires in 12.0 days, at 2026-06-13T12:00:00Z" in serving_only
    assert "/tls/ca.crt" not in serving_only
    both = expiry_warning(_loaded(12, -2), FILES, NOW, 30)
    assert both is not None and "a CA in the client CA file /tls/ca.crt expired 2.0 days ago" in both


def test_the_gauge_reads_seconds_left_at_scrape_time_and_follows_a_reload() -> None:
    now = [NOW]
    watch = ExpiryWatch(FILES, 30, None, clock=lambda: now[0])
    watch.loaded(_loaded(10, 100))
    assert (_gauge("serving"), _gauge("client-ca")) == (10 * 86400, 100 * 86400)
    now[0] += DAY
    assert (_gauge("serving"), _gauge("client-ca")) == (9 * 86400, 99 * 86400)
    watch.loaded(_loaded(400, 800))
    assert (_gauge("serving"), _gauge("client-ca")) == (399 * 86400, 799 * 86400)


def test_the_gauge_is_set_from_the_files_when_they_load(tmp_path: Path) -> None:
    tls = extender_tls(tmp_path)
    watch = ExpiryWatch(FILES, 30, None)
    loaded = ReloadingTls(TlsFiles(tls.serving_cert, tls.serving_key, tls.ca_cert), on_load=watch.loaded).current
    serving = _gauge("serving")
    assert serving is not None
    assert abs(serving - (loaded.serving_not_after - dt.datetime.now(dt.UTC)).total_seconds()) < 5
    assert 364 * 86400 < serving <= 365 * 86400


def test_a_warning_is_posted_at_the_first_check_and_then_at_most_once_a_day() -> None:
    now = [NOW]
    posted: list[str] = []
    watch = ExpiryWatch(FILES, 30, posted.append, clock=lambda: now[0])
    loaded = _loaded(20, 400)
    assert watch.check(loaded) is not None and len(posted) == 1
    now[0] += DAY - dt.timedelta(seconds=1)
    assert watch.check(loaded) is None and len(posted) == 1
    now[0] += dt.timedelta(seconds=1)
    assert watch.check(loaded) is not None and len(posted) == 2
    assert ExpiryWatch(FILES, 30, posted.append, clock=lambda: NOW).check(_loaded(31, 400)) is None
    assert len(posted) == 2


def test_a_failed_post_is_logged_and_the_warning_still_given(caplog: pytest.LogCaptureFixture) -> None:
    def refuse(message: str) -> None:
        raise client.ApiException(status=403, reason="Forbidden")

    watch = ExpiryWatch(FILES, 30, refuse, clock=lambda: NOW)
    assert watch.check(_loaded(5, 400)) is not None
    assert any(f"posting the {REASON} event failed" in record.getMessage() for record in caplog.records)


def test_without_a_pod_the_warning_is_only_logged(caplog: pytest.LogCaptureFixture) -> None:
    assert pod_from_env({"NATIVEDRA_POD_NAME": "x"}) is None
    watch = ExpiryWatch(FILES, 30, None, clock=lambda: NOW)
    assert watch.check(_loaded(5, 400)) is not None
    assert any(record.getMessage().startswith(f"{REASON}: the serving certificate") for record in caplog.records)


def test_the_event_is_a_warning_on_the_extenders_own_pod() -> None:
    pod = pod_from_env(
        {"NATIVEDRA_POD_NAME": "ext-1", "NATIVEDRA_POD_NAMESPACE": "nativedra-system", "NATIVEDRA_POD_UID": "u-1"}
    )
    assert pod == PodRef("ext-1", "nativedra-system", "u-1")
    event = pod_warning(pod, "soon", NOW)
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "ext-1",
        "namespace": "nativedra-system",
        "uid": "u-1",
    }
    assert event["metadata"] == {"generateName": "ext-1.", "namespace": "nativedra-system"}
    assert (event["type"], event["reason"], event["message"]) == ("Warning", "CertificateExpiringSoon", "soon")
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-06-01T12:00:00Z"


def test_run_checks_at_once_with_what_the_reloader_holds_now() -> None:
    posted: list[str] = []
    stop = threading.Event()
    stop.set()
    ExpiryWatch(FILES, 30, posted.append, clock=lambda: NOW).run(lambda: _loaded(3, 400), stop)
    assert len(posted) == 1


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return parser.parse_args(["extender", *argv])


def test_the_warning_days_default_to_30_and_fall_back_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _parse().certificate_warning_days == 30
    assert _parse("--certificate-warning-days=7").certificate_warning_days == 7
    monkeypatch.setenv("NATIVEDRA_CERTIFICATE_WARNING_DAYS", "14")
    assert _parse().certificate_warning_days == 14
