"""The backend is chosen by name, and a wrong choice says what to do instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.discovery import DiscoveryError
from dra_driver.discovery.factory import BACKENDS, make_backend


@pytest.mark.parametrize("name", [name for name in BACKENDS if name != "nvml"])
def test_each_backend_without_a_driver_to_load_is_made_by_its_name(name: str, tmp_path: Path) -> None:
    assert make_backend(name, profile="l4-4x", sys_root=tmp_path).name == name


def test_the_nvml_backend_looks_for_the_driver_under_the_given_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pynvml  # noqa: PLC0415

    def library_not_found() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", library_not_found)  # as on a node without the NVIDIA driver
    with pytest.raises(DiscoveryError, match=f"tried {tmp_path}/"):
        make_backend("nvml", driver_root=tmp_path)


def test_the_simulated_backend_reads_the_profile_it_was_given() -> None:
    assert len(make_backend("simulated", profile="l4-4x").discover().gpus) == 4


def test_the_simulated_backend_needs_a_profile() -> None:
    with pytest.raises(DiscoveryError, match="needs --profile"):
        make_backend("simulated")


def test_an_unknown_backend_lists_the_known_ones() -> None:
    with pytest.raises(DiscoveryError, match="'cuda': choose one of nvml, sysfs, simulated"):
        make_backend("cuda")
