"""Certificates rotate under a running extender: a real uvicorn server built by the extender's own
`_server`, real TLS clients with client certificates. Every handshake succeeds across a serving
certificate rotation and new handshakes see the new certificate; after a CA rotation the new client
certificate is accepted and the old one refused; files that cannot be loaded leave the last good
context serving, logged once, naming the file; a Secret volume's `..data` swap is picked up."""

from __future__ import annotations

import argparse
import contextlib
import http.client
import logging
import shutil
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography import x509
from fastapi import FastAPI

from extender import cli
from extender.serve.client_identity import DEFAULT_IDENTITIES, parse_identities
from nativedra.base.certs.tls_reload import ReloadingTls, TlsFileError, TlsFiles, load
from nativedra.cluster.pki import ExtenderTls, extender_tls, renew_extender_tls
from testkit.uvicorn_thread import loopback_port, running

CHECK_EVERY_S = 0.05  # the default second, shortened so that a test waits milliseconds


def _files(tls: ExtenderTls) -> TlsFiles:
    return TlsFiles(tls.serving_cert, tls.serving_key, tls.ca_cert)


def _serial(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def _client(cert: Path, key: Path, *trusted: bytes) -> ssl.SSLContext:
    """A scheduler-like client: verifies the server against `trusted`, presents `cert`. The files
    are read now, so a later rotation does not change what this client presents."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_cert_chain(cert, key)
    for pem in trusted:
        context.load_verify_locations(cadata=pem.decode())
    return context


def _get(port: int, context: ssl.SSLContext, host: str = "127.0.0.1") -> int:
    """One request on a new connection (a new handshake); the serial of the certificate served.
    By IP address the client sends no server name, as kube-scheduler does for an IP urlPrefix."""
    connection = http.client.HTTPSConnection(host, port, context=context, timeout=5)
    try:
        connection.request("GET", "/")
        response = connection.getresponse()
        assert response.status == 200 and response.read() == b'"ok"'
        assert connection.sock is not None
        der = connection.sock.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der).serial_number
    finally:
        connection.close()


@contextlib.contextmanager
def serving(tls: ExtenderTls) -> Iterator[int]:
    """The extender's HTTPS listener (cli._tls and cli._server) on a small app; yields its port."""
    app = FastAPI()
    app.get("/")(lambda: "ok")
    port = loopback_port()
    args = argparse.Namespace(
        address="127.0.0.1",
        max_connections=64,
        shutdown_grace_seconds=1,
        insecure_http=False,
        tls_cert_file=tls.serving_cert,
        tls_key_file=tls.serving_key,
        client_ca_file=tls.ca_cert,
        client_identities=parse_identities(DEFAULT_IDENTITIES),
    )
    settings = cli._tls(args)
    assert isinstance(settings, dict)
    reloading = ReloadingTls(_files(tls), check_every_s=CHECK_EVERY_S)
    with running(cli._server(app, args, port, reloading, **settings)):
        yield port


def _until(condition: Callable[[], bool], what: str, seconds: float = 3.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError(f"not within {seconds} s: {what}")


def test_a_serving_certificate_rotation_fails_no_request_and_new_handshakes_see_the_new_one(tmp_path: Path) -> None:
    tls = extender_tls(tmp_path)
    client = _client(tls.client_cert, tls.client_key, tls.ca_cert.read_bytes())
    old = _serial(tls.serving_cert)
    seen: list[int] = []
    failures: list[BaseException] = []
    stop = threading.Event()

    def load_loop() -> None:
        while not stop.is_set():
            try:
                seen.append(_get(port, client))
            except Exception as error:  # every failure is the test's finding  # noqa: BLE001
                failures.append(error)

    with serving(tls) as port:
        loop = threading.Thread(target=load_loop)
        loop.start()
        try:
            _until(lambda: len(seen) >= 5, "requests before the rotation")
            renew_extender_tls(tls)
            new = _serial(tls.serving_cert)
            _until(lambda: new in seen, "a handshake with the renewed certificate")
            count = len(seen)
            _until(lambda: len(seen) >= count + 5, "requests after the rotation")
        finally:
            stop.set()
            loop.join(10)
    assert failures == [], "a request failed during the rotation"
    assert set(seen) == {old, new}
    switched = seen.index(new)
    assert seen[:switched] == [old] * switched and seen[switched:] == [new] * (len(seen) - switched), (
        "once the new certificate is served, no handshake gets the old one"
    )


def _accepted(port: int, client: ssl.SSLContext, serving_cert: Path) -> bool:
    """The client gets an answer, from the serving certificate now in `serving_cert`."""
    with contextlib.suppress(ssl.SSLError, ConnectionError):
        return _get(port, client) == _serial(serving_cert)
    return False


def test_a_ca_rotation_through_a_bundle_accepts_both_clients_then_only_the_new(tmp_path: Path) -> None:
    """The documented order: both CAs trusted, leaves switched, old CA dropped. Both CAs have the
    same name, as when an admin re-runs the same openssl commands."""
    tls = extender_tls(tmp_path)
    old_ca = tls.ca_cert.read_bytes()
    old_client = _client(tls.client_cert, tls.client_key, old_ca)
    with serving(tls) as port:
        assert _get(port, old_client, "localhost")  # with a server name this time
        renew_extender_tls(tls, new_ca=True)
        new_ca = tls.ca_cert.read_bytes()
        tls.ca_cert.write_bytes(old_ca + new_ca)  # the bundle, written before the leaves are served
        old_client.load_verify_locations(cadata=new_ca.decode())  # the scheduler trusts both CAs too
        new_client = _client(tls.client_cert, tls.client_key, old_ca, new_ca)
        _until(lambda: _accepted(port, new_client, tls.serving_cert), "the new client certificate accepted")
        assert _get(port, old_client) == _serial(tls.serving_cert), "the old client certificate, still trusted"
        tls.ca_cert.write_bytes(new_ca)
        _until(lambda: not _accepted(port, old_client, tls.serving_cert), "the old client certificate refused")
        with pytest.raises((ssl.SSLError, ConnectionError)):
            _get(port, old_client)
        assert _get(port, new_client) == _serial(tls.serving_cert)


def test_no_session_resumes_so_a_client_ca_rotated_out_lets_no_one_back_in(tmp_path: Path) -> None:
    """A resumed TLS session skips verifying the client against the CA file: the extender issues no
    session ticket, so once the old client CA is dropped its clients are refused on every new
    connection, including one that offers the session it had."""
    tls = extender_tls(tmp_path)
    old_ca = tls.ca_cert.read_bytes()
    old_client = _client(tls.client_cert, tls.client_key, old_ca)
    request = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    with serving(tls) as port:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            old_client.wrap_socket(raw, server_hostname="localhost") as first,
        ):
            first.sendall(request)
            assert b"200 OK" in first.recv(4096)
            session = first.session
        assert session is not None and not session.has_ticket, "no ticket issued"
        renew_extender_tls(tls, new_ca=True)  # the old CA is gone from ca.crt at once
        _until(lambda: not _accepted(port, old_client, tls.serving_cert), "the old client certificate refused")
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            pytest.raises((ssl.SSLError, ConnectionError)),
            old_client.wrap_socket(raw, server_hostname="localhost", session=session) as resumed,
        ):
            resumed.sendall(request)
            if not resumed.recv(4096):
                raise ConnectionError("closed without an answer")


def test_files_that_cannot_be_loaded_keep_the_last_good_context_and_are_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tls = extender_tls(tmp_path)
    client = _client(tls.client_cert, tls.client_key, tls.ca_cert.read_bytes())
    serial = _serial(tls.serving_cert)
    good_key = tls.serving_key.read_bytes()
    other = extender_tls(tmp_path / "other")
    caplog.set_level(logging.ERROR, logger="nativedra.base.certs.tls_reload")
    with serving(tls) as port:
        for broken, reason in (
            (good_key[: len(good_key) // 2], "holds no unencrypted PEM private key"),  # caught mid-write
            (other.serving_key.read_bytes(), "does not match the certificate"),
        ):
            caplog.clear()
            tls.serving_key.write_bytes(broken)
            for _ in range(5):
                assert _get(port, client) == serial
                time.sleep(CHECK_EVERY_S)
            errors = [record.getMessage() for record in caplog.records]
            assert len(errors) == 1, errors
            assert f"{tls.serving_key}: {reason}" in errors[0]
        tls.serving_key.write_bytes(good_key)
        renew_extender_tls(tls)
        _until(lambda: _get(port, client) == _serial(tls.serving_cert), "the repaired files served")


def test_a_certificate_that_cannot_serve_at_start_is_an_error_naming_the_file(tmp_path: Path) -> None:
    tls = extender_tls(tmp_path)
    tls.ca_cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n")
    with pytest.raises(TlsFileError, match=str(tls.ca_cert)):
        load(_files(tls))
    tls.serving_cert.unlink()
    with pytest.raises(TlsFileError, match=f"{tls.serving_cert}: cannot be read"):
        load(_files(tls))


def _secret_volume(volume: Path, source: ExtenderTls, version: str) -> None:
    """What the kubelet does for a Secret volume: the keys are symlinks through `..data`, which is
    itself a symlink to a timestamped directory, swapped by one rename."""
    data = volume / version
    data.mkdir()
    for key, path in (("tls.crt", source.serving_cert), ("tls.key", source.serving_key), ("ca.crt", source.ca_cert)):
        shutil.copyfile(path, data / key)
        if not (volume / key).is_symlink():
            (volume / key).symlink_to(Path("..data") / key)
    (volume / "..data_tmp").symlink_to(version)
    old = (volume / "..data").readlink() if (volume / "..data").is_symlink() else None
    (volume / "..data_tmp").replace(volume / "..data")
    if old:
        shutil.rmtree(volume / old)


def test_a_secret_volume_update_is_picked_up_and_checks_are_at_most_once_a_period(tmp_path: Path) -> None:
    source = extender_tls(tmp_path / "source")
    volume = tmp_path / "volume"
    volume.mkdir()
    _secret_volume(volume, source, "..2026_01_01_00_00_00.1")
    now = [0.0]
    loads: list[int] = []
    reloading = ReloadingTls(
        TlsFiles(volume / "tls.crt", volume / "tls.key", volume / "ca.crt"),
        on_load=lambda loaded: loads.append(loaded.serving_serial),
        clock=lambda: now[0],
    )
    first = reloading.context
    assert loads == [_serial(source.serving_cert)]
    renew_extender_tls(source, new_ca=True)
    _secret_volume(volume, source, "..2026_01_01_00_01_00.2")
    now[0] += 0.5
    assert reloading.refresh().context is first, "looked at again before a second had passed"
    now[0] += 0.6
    assert reloading.refresh().serving_serial == _serial(source.serving_cert)
    assert loads == [loads[0], _serial(source.serving_cert)]
    now[0] += 1.1
    assert reloading.refresh() is reloading.current and len(loads) == 2, "unchanged files are not loaded again"
