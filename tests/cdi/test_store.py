"""Per-claim spec files: one file per claim, orphans removed, no path from a bad UID."""

from __future__ import annotations

import stat
import uuid
from pathlib import Path

import pytest
import yaml

from cdi.store import SpecStore
from nativedra.base.kube.names import CDI_CLASS, CDI_VENDOR
from tests.cdi.test_spec import device, spec


def test_store_writes_one_file_per_claim_and_removes_orphans(tmp_path: Path) -> None:
    store = SpecStore(tmp_path / "cdi", CDI_VENDOR, CDI_CLASS)
    kept, orphan = str(uuid.uuid4()), str(uuid.uuid4())
    for uid in (kept, orphan):
        store.write(uid, spec(device(name=f"{uid}-gpu-0")))
    (tmp_path / "cdi" / "nvidia.yaml").write_text("kind: nvidia.com/gpu\n")  # someone else's spec stays
    path = store.path_for(kept)
    assert path.name == f"{CDI_VENDOR}-{CDI_CLASS}_{kept}.yaml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert yaml.safe_load(path.read_text())["devices"][0]["name"] == f"{kept}-gpu-0"
    assert store.remove_orphans({kept}) == [orphan]
    assert sorted(p.name for p in (tmp_path / "cdi").iterdir()) == [path.name, "nvidia.yaml"]
    assert not [p for p in (tmp_path / "cdi").iterdir() if p.name.endswith(".tmp")], "no temp file is left"


@pytest.mark.parametrize("uid", ["../../etc/passwd", "ABC", "", "0a1b/../x", "0c9e7d8a-6f1b-4b7e-9c1d-2f3a4b5c6d7e\n"])
def test_store_never_builds_a_path_from_an_invalid_uid(tmp_path: Path, uid: str) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes UID"):
        SpecStore(tmp_path, CDI_VENDOR, CDI_CLASS).path_for(uid)
