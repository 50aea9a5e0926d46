"""CDI specs: minimum version from the fields used, name rules, atomic per-claim files."""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path

import pytest
import yaml

from cdi.spec import CdiDevice, ContainerEdits, DeviceNode, Mount, Spec, SpecError, minimum_version, to_document
from cdi.store import SpecStore

NODE = DeviceNode(path="/dev/nvidia0", type="c", major=195, minor=0)


def spec(*devices: CdiDevice, kind: str = "k8s.gpu.nativedra.dev/claim", **extra: object) -> Spec:
    return Spec(kind=kind, devices=devices, **extra)  # type: ignore[arg-type]


def device(name: str = "claim-gpu-0", edits: ContainerEdits | None = None, **extra: object) -> CdiDevice:
    return CdiDevice(name=name, container_edits=edits or ContainerEdits(device_nodes=(NODE,)), **extra)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("the_spec", "expected"),
    [
        (spec(device()), "0.3.0"),
        (spec(device(edits=ContainerEdits(mounts=(Mount("/a", "/b", type="bind"),)))), "0.4.0"),
        (spec(device(edits=ContainerEdits(device_nodes=(DeviceNode("/dev/x", host_path="/dev/y"),)))), "0.5.0"),
        (spec(device(name="0a1b-gpu-0")), "0.5.0"),
        (spec(device(annotations={"a": "b"})), "0.6.0"),
        (spec(device(), kind="vendor.io/dotted.class"), "0.6.0"),
        (spec(device(edits=ContainerEdits(additional_gids=(44,)))), "0.7.0"),
    ],
)
def test_minimum_version_follows_the_fields_used(the_spec: Spec, expected: str) -> None:
    assert minimum_version(the_spec) == expected
    assert to_document(the_spec)["cdiVersion"] == expected


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (spec(kind="novendor"), "vendor>/<class"),
        (spec(device(), kind="-bad/claim"), "invalid vendor"),
        (spec(), "at least one device"),
        (spec(device(name="bad name")), "invalid CDI device name"),
        (spec(device(), device()), "defined twice"),
        (spec(device(edits=ContainerEdits(device_nodes=(DeviceNode("dev/nvidia0"),)))), "not absolute"),
        (spec(device(edits=ContainerEdits())), "no container edits"),
    ],
)
def test_invalid_specs_are_rejected_with_the_part_named(bad: Spec, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        to_document(bad)


def test_store_writes_one_file_per_claim_and_removes_orphans(tmp_path: Path) -> None:
    store = SpecStore(tmp_path / "cdi", "k8s.gpu.nativedra.dev", "claim")
    kept, orphan = str(uuid.uuid4()), str(uuid.uuid4())
    for uid in (kept, orphan):
        store.write(uid, spec(device(name=f"{uid}-gpu-0")))
    (tmp_path / "cdi" / "nvidia.yaml").write_text("kind: nvidia.com/gpu\n")  # someone else's spec stays
    path = store.path_for(kept)
    assert path.name == f"k8s.gpu.nativedra.dev-claim_{kept}.yaml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert yaml.safe_load(path.read_text())["devices"][0]["name"] == f"{kept}-gpu-0"
    assert store.remove_orphans({kept}) == [orphan]
    assert sorted(p.name for p in (tmp_path / "cdi").iterdir()) == [path.name, "nvidia.yaml"]
    assert not [p for p in (tmp_path / "cdi").iterdir() if p.name.endswith(".tmp")], "no temp file is left"


@pytest.mark.parametrize("uid", ["../../etc/passwd", "ABC", "", "0a1b/../x"])
def test_store_never_builds_a_path_from_an_invalid_uid(tmp_path: Path, uid: str) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes UID"):
        SpecStore(tmp_path, "k8s.gpu.nativedra.dev", "claim").path_for(uid)


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fsutil import atomic  # noqa: PLC0415

    target = tmp_path / "file"
    atomic.atomic_write(target, b"old")

    def broken_fsync(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        atomic.atomic_write(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["file"]
