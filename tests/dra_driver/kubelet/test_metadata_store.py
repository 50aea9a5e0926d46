"""The device metadata files on the host: staged files appear only when published, restore
rewrites only what differs, orphans go, and only a validated UID and request name become a path."""

from __future__ import annotations

import stat
import uuid
from pathlib import Path

import pytest

from dra_driver.kubelet.metadata_store import FILE_MODE, SUBDIR, MetadataStore

FILES = {"gpus": '{"devices": ["gpu-0"]}', "small": '{"devices": ["gpu-2-1of4-0"]}'}


def _uid() -> str:
    return str(uuid.uuid4())


def test_staged_files_appear_only_when_published_and_are_readable_by_the_container(tmp_path: Path) -> None:
    store, uid = MetadataStore(tmp_path), _uid()
    with store.staged(uid, FILES) as publish:
        assert store.read(uid) == {}, "nothing visible before publish"
        publish()
    store.sync(uid)
    assert store.read(uid) == FILES
    path = store.path_for(uid, "gpus")
    assert path == tmp_path.absolute() / SUBDIR / uid / "gpus.json"
    assert stat.S_IMODE(path.stat().st_mode) == FILE_MODE
    assert sorted(p.name for p in store.claim_dir(uid).iterdir()) == ["gpus.json", "small.json"]


def test_files_staged_but_not_published_leave_nothing_behind(tmp_path: Path) -> None:
    store, uid = MetadataStore(tmp_path), _uid()
    with pytest.raises(RuntimeError), store.staged(uid, FILES):
        raise RuntimeError("prepare failed before publishing")
    assert list(store.claim_dir(uid).iterdir()) == []


def test_restore_writes_only_a_missing_or_changed_file(tmp_path: Path) -> None:
    store, uid = MetadataStore(tmp_path), _uid()
    assert store.restore(uid, FILES) is True
    assert store.read(uid) == FILES
    assert store.restore(uid, FILES) is False, "identical files are left alone"
    store.path_for(uid, "small").unlink()
    store.path_for(uid, "gpus").write_text("edited")
    before = store.path_for(uid, "gpus").stat().st_ino
    assert store.restore(uid, FILES) is True
    assert store.read(uid) == FILES
    assert store.path_for(uid, "gpus").stat().st_ino != before, "replaced whole, never edited in place"


def test_read_ignores_files_that_are_not_a_requests_metadata(tmp_path: Path) -> None:
    store, uid = MetadataStore(tmp_path), _uid()
    store.restore(uid, {"gpus": "x"})
    (store.claim_dir(uid) / "Not_A_Label.json").write_text("y")
    (store.claim_dir(uid) / "notes.txt").write_text("z")
    assert store.read(uid) == {"gpus": "x"}
    assert store.read(_uid()) == {}


def test_remove_orphans_keeps_owned_claims_and_ignores_foreign_directories(tmp_path: Path) -> None:
    store = MetadataStore(tmp_path)
    owned, orphan = _uid(), _uid()
    for uid in (owned, orphan):
        store.restore(uid, {"gpus": "x"})
    (store.directory / "lost+found").mkdir()
    assert store.claim_uids() == {owned, orphan}
    assert store.remove_orphans({owned}) == [orphan]
    assert store.claim_uids() == {owned}
    assert (store.directory / "lost+found").is_dir(), "only claim directories are ours to delete"
    assert store.remove(orphan) is False, "already gone is fine"


def test_an_empty_store_has_no_claims(tmp_path: Path) -> None:
    store = MetadataStore(tmp_path / "never-written")
    assert store.claim_uids() == set() and store.remove_orphans(set()) == []


@pytest.mark.parametrize(("uid", "request_name"), [("../../etc", "gpus"), (str(uuid.uuid4()), "../x"), ("", "gpus")])
def test_only_a_kubernetes_uid_and_a_dns_label_become_a_host_path(tmp_path: Path, uid: str, request_name: str) -> None:
    with pytest.raises(ValueError, match="is not a"):
        MetadataStore(tmp_path).path_for(uid, request_name)
