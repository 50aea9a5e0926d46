"""Serving TLS that follows its files, so certificates rotate without a restart or a failed handshake.

uvicorn builds one SSLContext at start. The listening context here carries an SNI callback, which
OpenSSL runs on every ClientHello (with or without a server name): when the certificate, key or
client CA file has changed (a new inode, size, mtime or symlink target, looked at no more than once
a second) it builds a fresh context and hands the handshake to it. A Secret volume's update, an
atomic swap of its `..data` symlink, changes every file's target at once. Files that cannot be
loaded (half written, a key that does not match the certificate) leave the last good context
serving and are logged once per change, naming the file. Open connections keep the context they
shook hands with.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

log = logging.getLogger(__name__)
CHECK_EVERY_S = 1.0

FileStamp = tuple[str, int, int, int, int]  # resolved path, device, inode, size, mtime (ns)


@dataclass(frozen=True)
class TlsFiles:
    cert: Path
    key: Path
    client_ca: Path

    def all(self) -> tuple[Path, Path, Path]:
        return self.cert, self.key, self.client_ca


class TlsFileError(Exception):
    """A file that cannot be served from, with the file named first."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path


@dataclass(frozen=True)
class LoadedTls:
    """A context ready to serve, and the earliest notAfter of each file's certificates."""

    context: ssl.SSLContext
    serving_not_after: dt.datetime
    client_ca_not_after: dt.datetime
    serving_serial: int


def file_stamp(path: Path) -> FileStamp:
    """What changes when the file is rewritten or its symlink chain points elsewhere. A missing
    file has a stamp too, so that its return counts as a change."""
    try:
        found = path.stat()
    except OSError:
        return (str(path), -1, -1, -1, -1)
    return (os.path.realpath(path), found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns)


def stamp(files: TlsFiles) -> tuple[FileStamp, ...]:
    return tuple(file_stamp(path) for path in files.all())


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise TlsFileError(path, f"cannot be read ({error.strerror or error})") from error


def _certificates(path: Path, pem: bytes) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError as error:
        raise TlsFileError(path, f"holds no complete PEM certificate ({error})") from error


def _spki(key: PublicKeyTypes) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def load(files: TlsFiles) -> LoadedTls:
    """A server context that requires a client certificate from the CA file, or why the files
    cannot make one. The files are checked with `cryptography` first, so that the error names the
    file at fault; OpenSSL then loads the same paths."""
    cert_pem, key_pem, ca_pem = (_read(path) for path in files.all())
    chain = _certificates(files.cert, cert_pem)
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as error:
        raise TlsFileError(files.key, f"holds no unencrypted PEM private key ({error})") from error
    if _spki(key.public_key()) != _spki(chain[0].public_key()):
        raise TlsFileError(files.key, f"does not match the certificate in {files.cert}")
    authorities = _certificates(files.client_ca, ca_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(files.cert, files.key)
    except (OSError, ssl.SSLError) as error:  # the files changed again since they were read
        raise TlsFileError(files.cert, f"rejected by OpenSSL together with {files.key} ({error})") from error
    try:
        context.load_verify_locations(cadata=ca_pem.decode("ascii"))
    except (ssl.SSLError, UnicodeDecodeError) as error:
        raise TlsFileError(files.client_ca, f"rejected by OpenSSL ({error})") from error
    context.verify_mode = ssl.CERT_REQUIRED
    # No session tickets: a resumed session skips verifying the client against the CA file, so one
    # from before a client CA rotated out would still be let in. The scheduler keeps its
    # connections open, so a full handshake per connection costs nothing that counts.
    context.options |= ssl.OP_NO_TICKET
    context.num_tickets = 0
    return LoadedTls(
        context=context,
        serving_not_after=min(cert.not_valid_after_utc for cert in chain),
        client_ca_not_after=min(cert.not_valid_after_utc for cert in authorities),
        serving_serial=chain[0].serial_number,
    )


class ReloadingTls:
    """`context` is what the server listens with; every handshake on it is served by the newest
    context that loaded. `on_load` sees the first load and every reload (for the expiry gauges)."""

    def __init__(
        self,
        files: TlsFiles,
        on_load: Callable[[LoadedTls], None] = lambda _: None,
        check_every_s: float = CHECK_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.files = files
        self.on_load = on_load
        self.check_every_s = check_every_s
        self.clock = clock
        self._lock = threading.Lock()
        self._stamp = stamp(files)  # taken before reading, so a write during the read is seen next time
        self._current = load(files)
        self._checked = clock()
        self.context = self._current.context
        self.context.sni_callback = self._client_hello
        on_load(self._current)

    @property
    def current(self) -> LoadedTls:
        return self._current

    def refresh(self) -> LoadedTls:
        """The newest loadable material, looking at the files if a check is due."""
        with self._lock:
            now = self.clock()
            if now - self._checked < self.check_every_s:
                return self._current
            self._checked = now
            seen = stamp(self.files)
            if seen == self._stamp:
                return self._current
            self._stamp = seen
            try:
                loaded = load(self.files)
            except TlsFileError as error:
                log.error("TLS files changed but cannot be loaded; still serving the previous ones: %s", error)
                return self._current
            except Exception:  # a key type cryptography cannot read: the same, whatever it raised
                log.exception("TLS files changed but cannot be loaded; still serving the previous ones")
                return self._current
            self._current = loaded
        log.info(
            "TLS files reloaded: serving certificate serial %x valid until %s, client CA valid until %s",
            loaded.serving_serial,
            loaded.serving_not_after.isoformat(),
            loaded.client_ca_not_after.isoformat(),
        )
        self.on_load(loaded)
        return loaded

    def _client_hello(self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: object) -> None:
        """Runs inside the handshake: an exception here would fail it, so none may escape."""
        try:
            fresh = self.refresh().context
        except Exception:  # serving with the last good context beats refusing the client
            log.exception("TLS reload check failed; this handshake uses the last context that loaded")
            fresh = self._current.context
        if connection.context is not fresh:
            connection.context = fresh
