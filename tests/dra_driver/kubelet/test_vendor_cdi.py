"""A GPU is matched to the vendor's own CDI device by UUID or index, in the vendor's kind only;
our own specs and unreadable files are skipped, never fatal."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from dra_driver.inventory import Gpu, Vendor
from dra_driver.kubelet.vendor_cdi import vendor_device_id
from nativedra.base.kube.names import CDI_KIND, CDI_VENDOR

GPU = Gpu.model_validate_json(
    json.dumps(
        {
            "vendor": "nvidia",
            "index": 3,
            "minor": 3,
            "uuid": "GPU-5c1c7b2a",
            "productName": "NVIDIA L4",
            "brand": "NVIDIA",
            "architecture": "Ada Lovelace",
            "memoryBytes": 24 * 2**30,
            "pciBusID": "0000:04:00.0",
        }
    )
)


def _spec(root: Path, file: str, kind: str, names: list[str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    document = {"cdiVersion": "0.6.0", "kind": kind, "devices": [{"name": n, "containerEdits": {}} for n in names]}
    text = json.dumps(document) if file.endswith(".json") else yaml.safe_dump(document)
    (root / file).write_text(text)


def test_the_uuid_is_preferred_over_the_index(tmp_path: Path) -> None:
    _spec(tmp_path, "nvidia.yaml", "nvidia.com/gpu", ["all", "3", GPU.uuid])
    assert vendor_device_id(GPU, (tmp_path,)) == f"nvidia.com/gpu={GPU.uuid}"


def test_the_index_is_used_when_the_spec_names_devices_by_index(tmp_path: Path) -> None:
    _spec(tmp_path, "nvidia.json", "nvidia.com/gpu", ["0", "3"])
    assert vendor_device_id(GPU, (tmp_path,)) == "nvidia.com/gpu=3"


def test_specs_of_another_kind_or_vendor_do_not_match(tmp_path: Path) -> None:
    _spec(tmp_path, "amd.yaml", "amd.com/gpu", [GPU.uuid])
    _spec(tmp_path, "other.yaml", "nvidia.com/mig", [GPU.uuid])
    assert vendor_device_id(GPU, (tmp_path,)) is None
    amd = GPU.model_copy(update={"vendor": Vendor.AMD})
    assert vendor_device_id(amd, (tmp_path,)) == f"amd.com/gpu={GPU.uuid}"


def test_our_own_specs_are_never_taken_for_the_vendors(tmp_path: Path) -> None:
    _spec(tmp_path, f"{CDI_VENDOR}-claim.yaml", "nvidia.com/gpu", [GPU.uuid])
    _spec(tmp_path, "ours.yaml", CDI_KIND, [GPU.uuid])
    assert vendor_device_id(GPU, (tmp_path,)) is None


def test_unreadable_files_and_missing_roots_are_skipped(tmp_path: Path) -> None:
    broken, good = tmp_path / "broken", tmp_path / "good"
    broken.mkdir()
    (broken / "a.yaml").write_text("kind: [unclosed")
    (broken / "b.json").write_text("{not json")
    (broken / "c.yaml").write_text("- a list, not a spec")
    (broken / "d.txt").write_text("kind: nvidia.com/gpu")
    _spec(good, "nvidia.yaml", "nvidia.com/gpu", [GPU.uuid])
    assert vendor_device_id(GPU, (tmp_path / "missing", broken)) is None
    assert vendor_device_id(GPU, (tmp_path / "missing", broken, good)) == f"nvidia.com/gpu={GPU.uuid}"
