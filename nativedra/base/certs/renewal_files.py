"""The scheduler's client certificate on a control-plane node, renewed as one pair.

kube-scheduler re-reads its extender `certFile` and `keyFile` on new handshakes (docs/install.md,
"Certificate rotation"): two separate writes would let it read a new certificate beside the old key
and fail handshakes. So, as the kubelet lays out a mounted Secret, `tls.crt` and `tls.key` are links
through `..data` to a version directory; a renewal writes both files into a new version directory
(fsynced), then renames a new `..data` link over the old one: a reader sees the old pair or the new
one. Files installed by hand are first moved behind `..data` unchanged, so that step changes nothing
a reader sees either."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from cryptography import x509

from nativedra.base.certs.renewal import Ca, Outcome, Policy, RenewalError, decide_and_renew, load_leaf
from nativedra.base.fsutil.atomic import fsync_directory

CERT = "tls.crt"
KEY = "tls.key"
PAIR = (CERT, KEY)
DATA = "..data"
VERSION_PREFIX = "..nativedra-"
MODES = {CERT: 0o644, KEY: 0o600}


def read_cert(directory: Path) -> bytes:
    path = directory / CERT
    try:
        return path.read_bytes()
    except FileNotFoundError as error:
        raise RenewalError(f"{path}: missing (install the first client certificate by hand, then renew)") from error
    except OSError as error:
        raise RenewalError(f"{path}: cannot be read ({error.strerror})") from error


def _new_version(directory: Path, contents: Mapping[str, bytes]) -> Path:
    """A version directory holding `contents`, durable, not yet visible through `..data`."""
    version = Path(tempfile.mkdtemp(prefix=VERSION_PREFIX, dir=directory))
    try:
        version.chmod(0o755)
        for name, data in contents.items():
            path = version / name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, MODES[name])
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fchmod(handle.fileno(), MODES[name])
                os.fsync(handle.fileno())
            _same_owner(path, directory / name)
        fsync_directory(version)
    except BaseException:
        shutil.rmtree(version, ignore_errors=True)
        raise
    return version


def _same_owner(path: Path, like: Path) -> None:
    """Keep the owner of the files being replaced (a scheduler running as another user still reads them)."""
    with contextlib.suppress(OSError):
        stat = like.stat()
        if (stat.st_uid, stat.st_gid) != (os.geteuid(), os.getegid()):
            os.chown(path, stat.st_uid, stat.st_gid)


def _point_data_at(directory: Path, version: Path) -> None:
    link = directory / f"{DATA}_tmp"
    link.unlink(missing_ok=True)
    link.symlink_to(version.name)
    link.replace(directory / DATA)
    fsync_directory(directory)


def _behind_data(directory: Path) -> None:
    """Make each file of the pair a link through `..data`, showing readers the content they see now
    (nothing to do where neither file exists yet)."""
    if (directory / DATA).is_symlink() and all(_linked(directory, name) for name in PAIR):
        return
    if not any((directory / name).exists() for name in PAIR):
        return
    _point_data_at(directory, _new_version(directory, {name: (directory / name).read_bytes() for name in PAIR}))
    _link_through_data(directory)


def _linked(directory: Path, name: str) -> bool:
    path = directory / name
    return path.is_symlink() and path.readlink() == Path(DATA) / name


def _link_through_data(directory: Path) -> None:
    for name in PAIR:
        if _linked(directory, name):
            continue
        link = directory / f".{name}.link_tmp"
        link.unlink(missing_ok=True)
        link.symlink_to(Path(DATA) / name)
        link.replace(directory / name)
    fsync_directory(directory)


def publish_pair(directory: Path, cert_pem: bytes, key_pem: bytes) -> None:
    """Replace the pair in `directory` in one rename; earlier version directories are removed after."""
    _behind_data(directory)
    version = _new_version(directory, {CERT: cert_pem, KEY: key_pem})
    _point_data_at(directory, version)
    _link_through_data(directory)  # a first pair, in a directory that had none
    for stale in directory.glob(f"{VERSION_PREFIX}*"):
        if stale.name != version.name and stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)


def renew_client_dir(directory: Path, ca: Ca, policy: Policy, *, previous: x509.Certificate | None = None) -> Outcome:
    where = str(directory / CERT)
    current = load_leaf(read_cert(directory), where)
    issued, message = decide_and_renew(current, where, ca, policy, previous)
    if issued is None:
        return Outcome(False, message)
    try:
        publish_pair(directory, issued.cert_pem(), issued.key_pem())
    except OSError as error:
        raise RenewalError(
            f"{directory}: the renewed pair could not be written ({error}); the old pair is in place"
        ) from error
    return Outcome(True, message)
