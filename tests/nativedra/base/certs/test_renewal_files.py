"""The scheduler's client certificate files are renewed as one pair: files installed by hand are
moved behind `..data` unchanged, the renewed pair appears in one rename, a reader that resolves
`..data` always finds a certificate and the key it belongs to, nothing changes when nothing is due
or the CA is wrong, and a failed write leaves the old pair in place."""

from __future__ import annotations

import datetime as dt
import shutil
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from nativedra.base.certs import renewal_files as cert_renewal_files
from nativedra.base.certs.renewal import Ca, Policy, RenewalError, load_ca, renew
from nativedra.base.certs.renewal_files import CERT, DATA, KEY, VERSION_PREFIX, publish_pair, renew_client_dir
from nativedra.cluster.pki import ExtenderTls, extender_tls

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
DUE = Policy(NOW)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> ExtenderTls:
    return extender_tls(tmp_path_factory.mktemp("tls"))


def _ca(tls: ExtenderTls) -> Ca:
    return load_ca(tls.ca_cert.read_bytes(), "ca.crt", tls.ca_key.read_bytes(), "ca.key")


@pytest.fixture
def by_hand(tls: ExtenderTls, tmp_path: Path) -> Path:
    """A scheduler's directory as an admin installs it: regular files, the client certificate 10 days
    from expiry, and the caFile beside them."""
    directory = tmp_path / "nativedra-extender"
    directory.mkdir()
    old = x509.load_pem_x509_certificate(tls.client_cert.read_bytes())
    near = renew(old, _ca(tls), NOW, dt.timedelta(days=10))
    (directory / CERT).write_bytes(near.cert_pem())
    (directory / KEY).write_bytes(near.key_pem())
    (directory / KEY).chmod(0o600)
    (directory / "ca.crt").write_bytes(tls.ca_cert.read_bytes())
    return directory


def _pair_matches(cert_pem: bytes, key_pem: bytes) -> bool:
    cert = x509.load_pem_x509_certificate(cert_pem)
    key = serialization.load_pem_private_key(key_pem, None)
    return key.public_key() == cert.public_key()


def _link(path: Path) -> str:
    return str(path.readlink())


def _snapshot(directory: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry: where a link points (or '' for a file) and what reading it gives."""
    return {
        entry.name: (_link(entry) if entry.is_symlink() else "", entry.read_bytes() if entry.is_file() else b"")
        for entry in sorted(directory.iterdir())
    }


def test_files_installed_by_hand_are_renewed_as_one_pair_behind_data(tls: ExtenderTls, by_hand: Path) -> None:
    before = (by_hand / CERT).read_bytes()
    outcome = renew_client_dir(by_hand, _ca(tls), DUE)
    assert outcome.renewed and "renewed (10.0 days were left)" in outcome.message
    for name in (CERT, KEY):
        assert _link(by_hand / name) == f"{DATA}/{name}"
    assert _link(by_hand / DATA).startswith(VERSION_PREFIX)
    cert_pem, key_pem = (by_hand / CERT).read_bytes(), (by_hand / KEY).read_bytes()
    assert cert_pem != before and _pair_matches(cert_pem, key_pem)
    new = x509.load_pem_x509_certificate(cert_pem)
    new.verify_directly_issued_by(_ca(tls).cert)
    assert new.not_valid_after_utc == NOW + DUE.lifetime
    assert (by_hand / KEY).stat().st_mode & 0o777 == 0o600
    assert not (by_hand / "ca.crt").is_symlink(), "the caFile is not the renewal's to touch"
    assert [p.name for p in by_hand.glob(f"{VERSION_PREFIX}*")] == [_link(by_hand / DATA)]


def test_a_second_renewal_swaps_data_and_removes_the_version_before(tls: ExtenderTls, by_hand: Path) -> None:
    renew_client_dir(by_hand, _ca(tls), DUE)
    first = _link(by_hand / DATA)
    later = Policy(NOW + dt.timedelta(days=340))  # 25 days left by then
    assert renew_client_dir(by_hand, _ca(tls), later).renewed
    assert _link(by_hand / DATA) != first
    assert [p.name for p in by_hand.glob(f"{VERSION_PREFIX}*")] == [_link(by_hand / DATA)]
    assert _pair_matches((by_hand / CERT).read_bytes(), (by_hand / KEY).read_bytes())


def test_nothing_is_written_when_nothing_is_due(tls: ExtenderTls, by_hand: Path) -> None:
    renew_client_dir(by_hand, _ca(tls), DUE)
    before = _snapshot(by_hand)
    outcome = renew_client_dir(by_hand, _ca(tls), DUE)
    assert not outcome.renewed and "nothing to do" in outcome.message
    assert _snapshot(by_hand) == before


def test_a_wrong_ca_or_a_missing_certificate_changes_nothing(tls: ExtenderTls, by_hand: Path, tmp_path: Path) -> None:
    before = _snapshot(by_hand)
    other = extender_tls(tmp_path / "other")
    with pytest.raises(RenewalError, match=f"{by_hand / CERT}: CN=kube-scheduler was not signed by the CA"):
        renew_client_dir(by_hand, _ca(other), DUE)
    assert _snapshot(by_hand) == before
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(RenewalError, match=f"{empty / CERT}: missing"):
        renew_client_dir(empty, _ca(tls), DUE)
    assert list(empty.iterdir()) == []


def test_a_failed_swap_leaves_the_old_pair_and_the_next_run_tidies_up(
    tls: ExtenderTls, by_hand: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    renew_client_dir(by_hand, _ca(tls), DUE)  # behind ..data already
    later = Policy(NOW + dt.timedelta(days=340))
    old = (by_hand / CERT).read_bytes(), (by_hand / KEY).read_bytes()

    def disk_full(directory: Path, version: Path) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(cert_renewal_files, "_point_data_at", disk_full)
        with pytest.raises(RenewalError, match=r"could not be written .* the old pair is in place"):
            renew_client_dir(by_hand, _ca(tls), later)
    assert ((by_hand / CERT).read_bytes(), (by_hand / KEY).read_bytes()) == old
    assert renew_client_dir(by_hand, _ca(tls), later).renewed
    assert [p.name for p in by_hand.glob(f"{VERSION_PREFIX}*")] == [_link(by_hand / DATA)]


def test_a_reader_resolving_data_never_sees_a_mismatched_pair(tls: ExtenderTls, by_hand: Path) -> None:
    """Renewals back to back while a reader resolves `..data` and reads both files from the version
    it names, as the kubelet's layout promises: each version is complete before it is visible."""
    ca, stop, seen, bad = _ca(tls), threading.Event(), [0], []

    def read() -> None:
        while not stop.is_set():
            try:
                version = by_hand / _link(by_hand / DATA)
                pair = (version / CERT).read_bytes(), (version / KEY).read_bytes()
            except (FileNotFoundError, OSError):
                continue  # the version was removed after a newer one replaced it: resolve again
            seen[0] += 1
            if not _pair_matches(*pair):
                bad.append(version.name)

    renew_client_dir(by_hand, ca, DUE)
    reader = threading.Thread(target=read)
    reader.start()
    try:
        always_due = Policy(NOW, renew_before=dt.timedelta(days=1000))
        for _ in range(20):
            assert renew_client_dir(by_hand, ca, always_due).renewed
    finally:
        stop.set()
        reader.join()
    assert seen[0] > 0 and bad == []
    shutil.rmtree(by_hand)


def test_a_first_pair_and_links_of_the_admins_own_are_put_behind_data(tls: ExtenderTls, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    publish_pair(empty, tls.client_cert.read_bytes(), tls.client_key.read_bytes())
    assert (empty / CERT).read_bytes() == tls.client_cert.read_bytes()
    assert {_link(empty / name) for name in (CERT, KEY)} == {f"{DATA}/{CERT}", f"{DATA}/{KEY}"}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "client.pem").write_bytes(tls.client_cert.read_bytes())
    (elsewhere / "client-key.pem").write_bytes(tls.client_key.read_bytes())
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / CERT).symlink_to(elsewhere / "client.pem")
    (linked / KEY).symlink_to(elsewhere / "client-key.pem")
    assert renew_client_dir(linked, _ca(tls), Policy(NOW, renew_before=dt.timedelta(days=1000))).renewed
    assert _link(linked / CERT) == f"{DATA}/{CERT}"
    assert (linked / CERT).read_bytes() != tls.client_cert.read_bytes()
    assert (elsewhere / "client.pem").read_bytes() == tls.client_cert.read_bytes(), (
        "the admin's files stay as they were"
    )
