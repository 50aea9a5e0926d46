"""A published device read back from its API form gives what was published."""

from __future__ import annotations

from dra_driver.publishing.publish_config import PublishConfig
from dra_driver.publishing.published import DeviceKind, DeviceView, Fraction
from dra_driver.publishing.slices import devices_and_counters
from tests.dra_driver.claims import INVENTORY


def test_every_published_device_reads_back_as_published() -> None:
    devices = devices_and_counters(INVENTORY, PublishConfig(share_gpus=(0,)))[0]
    assert {d.kind for d in devices} == set(DeviceKind)
    for device in devices:
        view = DeviceView.from_api(device.api)
        assert (view.name, view.kind, view.gpu_index) == (device.name, device.kind, device.gpu_index)
        assert (view.fraction, view.mig_profile) == (device.fraction, device.mig_profile)
        assert view.product_name == device.gpu.product_name
        assert (view.memory_slices > 0) == (device.kind is DeviceKind.MIG)


def test_a_fraction_is_written_as_n_over_d_and_rounds_down() -> None:
    assert Fraction.parse(str(Fraction(1, 3))) == Fraction(1, 3)
    assert Fraction(1, 3).of(10) == 3
