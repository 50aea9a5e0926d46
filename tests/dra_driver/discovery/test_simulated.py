"""Shipped profiles load; bad profiles fail with the file, the GPU and the field named."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dra_driver.discovery.simulated import (
    ProfileError,
    SimulatedBackend,
    load_profile,
    packaged_profiles,
    resolve_profile,
)
from dra_driver.inventory import Vendor
from nativedra.cli import main

SHIPPED = ("h100-8x", "a100-8x", "l4-4x", "mi300x-8x")


def test_every_required_profile_ships() -> None:
    assert set(SHIPPED) <= set(packaged_profiles())


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profile_loads_with_unique_indexes(name: str) -> None:
    inventory = load_profile(resolve_profile(name))
    indexes = [gpu.index for gpu in inventory.gpus]
    assert indexes == sorted(set(indexes))
    assert all(gpu.memory_bytes > 0 for gpu in inventory.gpus)


def test_h100_profile_is_two_numa_nodes_of_mig_capable_gpus() -> None:
    inventory = load_profile(resolve_profile("h100-8x"))
    assert len(inventory.gpus) == 8
    assert {gpu.numa_node for gpu in inventory.gpus} == {0, 1}
    assert all(gpu.mig_capable and gpu.mig_memory_slices == 8 for gpu in inventory.gpus)
    one_g = next(p for p in inventory.gpus[0].mig_profiles if p.name == "1g.10gb")
    assert [p.start for p in one_g.placements] == list(range(7))


def test_mi300x_profile_is_amd() -> None:
    inventory = load_profile(resolve_profile("mi300x-8x"))
    assert {gpu.vendor for gpu in inventory.gpus} == {Vendor.AMD}


def _write(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _h100_document() -> dict[str, object]:
    return dict(yaml.safe_load(resolve_profile("h100-8x").read_text()))


def test_wrong_type_names_file_gpu_and_field(tmp_path: Path) -> None:
    document = _h100_document()
    document["gpus"][2]["numaNode"] = "zero"  # type: ignore[index]
    path = _write(tmp_path, document)
    with pytest.raises(ProfileError) as error:
        load_profile(path)
    message = str(error.value)
    assert str(path) in message
    assert "gpus[2] (index 2)" in message
    assert "numaNode" in message


def test_unknown_field_is_rejected_by_name(tmp_path: Path) -> None:
    document = _h100_document()
    document["gpus"][1]["colour"] = "green"  # type: ignore[index]
    with pytest.raises(ProfileError, match=r"gpus\[1\] \(index 1\).*colour"):
        load_profile(_write(tmp_path, document))


def test_unknown_top_level_field_is_rejected(tmp_path: Path) -> None:
    document = _h100_document()
    document["nodes"] = 3
    with pytest.raises(ProfileError, match=r"unknown field.*nodes"):
        load_profile(_write(tmp_path, document))


def test_duplicate_index_names_both_entries(tmp_path: Path) -> None:
    document = _h100_document()
    document["gpus"][5]["index"] = 3  # type: ignore[index]
    with pytest.raises(
        ProfileError, match=r"gpus\[5\] \(index 3\): field 'index': duplicate GPU index 3 \(also gpus\[3\]\)"
    ):
        load_profile(_write(tmp_path, document))


def test_unknown_model_is_named(tmp_path: Path) -> None:
    document = _h100_document()
    document["gpus"][0]["model"] = "b300"  # type: ignore[index]
    with pytest.raises(ProfileError, match=r"gpus\[0\].*model.*b300"):
        load_profile(_write(tmp_path, document))


def test_mig_placement_beyond_memory_slices_is_rejected(tmp_path: Path) -> None:
    document = _h100_document()
    document["models"]["h100-sxm5-80gb"]["migMemorySlices"] = 4  # type: ignore[index]
    with pytest.raises(ProfileError, match="exceeds migMemorySlices=4"):
        load_profile(_write(tmp_path, document))


def test_json_profiles_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "one.json"
    path.write_text(
        '{"gpus": [{"vendor": "nvidia", "index": 0, "minor": 0, "uuid": "GPU-1", "productName": "NVIDIA L4",'
        ' "brand": "NVIDIA", "architecture": "Ada Lovelace", "memoryBytes": 1024, "pciBusID": "0000:01:00.0"}]}'
    )
    assert load_profile(path).gpus[0].product_name == "NVIDIA L4"


def test_unknown_profile_name_lists_shipped_ones() -> None:
    with pytest.raises(ProfileError, match="h100-8x"):
        resolve_profile("no-such-profile")


@pytest.mark.parametrize("profile", ["h200-8x", "h100-8x", "a100-8x", "l4-4x", "mi300x-8x"])
def test_inventory_as_a_profile_simulates_the_same_gpus(
    profile: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`nativedra inventory -o profile` writes what the simulated backend reads back unchanged."""
    assert main(["inventory", "--backend", "simulated", "--profile", profile, "-o", "profile"]) == 0
    written = tmp_path / "node.yaml"
    written.write_text(capsys.readouterr().out)
    assert SimulatedBackend(str(written)).discover() == load_profile(resolve_profile(profile))


def test_a_fault_file_gives_gpus_their_faults(tmp_path: Path) -> None:
    faults = tmp_path / "faults.yaml"
    uuid = load_profile(resolve_profile("h100-8x")).gpus[5].uuid
    faults.write_text(
        yaml.safe_dump(
            {
                "unhealthy": [0],
                "faults": [{"gpu": 1, "xid": 79}, {"gpu": 2, "xid": 13}, {"gpu": uuid, "event": "double-bit-ecc"}],
            }
        )
    )
    gpus = SimulatedBackend("h100-8x", faults).discover().gpus
    reasons = {gpu.index: (gpu.tainting_fault.reason, gpu.health.value) for gpu in gpus if gpu.tainting_fault}
    assert reasons == {
        0: ("unhealthy", "Unhealthy"),
        1: ("xid-79", "Unhealthy"),
        2: ("xid-13", "Healthy"),
        5: ("double-bit-ecc", "Unhealthy"),
    }


@pytest.mark.parametrize(
    ("document", "named"),
    [
        ({"faults": [{"gpu": 1, "xid": "79"}]}, "faults[0]: field 'xid' must be an integer"),
        ({"faults": [{"gpu": 1, "event": "melted"}]}, "faults[0]: field 'event' must be one of"),
        ({"faults": [{"xid": 79}]}, "faults[0]: expected {gpu"),
        ({"faults": {"gpu": 1}}, "field 'faults' must be a list"),
        ({"broken": [1]}, "expected a mapping with keys"),
        ({"unhealthy": 0}, "field 'unhealthy' must be a list"),
        ({"faults": {}}, "field 'faults' must be a list"),
        ({"faults": [{"gpu": [1, 2], "xid": 79}]}, "faults[0]: field 'gpu' must be a GPU index or UUID"),
        ({"faults": [{"gpu": 99, "xid": 79}]}, "no GPU 99 on this node"),
    ],
)
def test_a_bad_fault_file_names_the_entry_and_field(tmp_path: Path, document: object, named: str) -> None:
    faults = tmp_path / "faults.yaml"
    faults.write_text(yaml.safe_dump(document))
    with pytest.raises(ProfileError) as error:
        SimulatedBackend("h100-8x", faults).discover()
    assert named in str(error.value) and str(faults) in str(error.value)
