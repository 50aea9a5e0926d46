"""Device selectors evaluated as the DRA allocator would."""

from __future__ import annotations

from extender.cel_eval import Selectors, device_view
from tests.builders import DRIVER, node_objects


def test_cel_selectors_with_quantities_versions_and_missing_attributes() -> None:
    _, slices = node_objects({"n": {}}, profile="h100-8x")
    device = next(s["spec"] for s in slices if "devices" in s["spec"])["devices"][0]
    view = device_view(DRIVER, device)
    selectors = Selectors()
    assert selectors.matches("device.capacity['gpu.nativedra.dev'].memory.compareTo(quantity('80Gi')) < 0", view)
    assert selectors.matches("device.capacity['gpu.nativedra.dev'].memory.compareTo(quantity('64Gi')) >= 0", view)
    assert selectors.matches(
        "device.attributes['gpu.nativedra.dev'].driverVersion.compareTo(semver('550.0.0')) >= 0", view
    )
    assert selectors.matches("device.attributes['resource.kubernetes.io'].pciBusID == '0000:18:00.0'", view)
    assert not selectors.matches("device.attributes['other.vendor.com'].type == 'gpu'", view), "runtime error: no match"
    assert selectors.matches("device.attributes['gpu.nativedra.dev'].?numaNode.orValue(0) == 0", view), (
        "syntax the library cannot parse matches (the scheduler's own DRA filter decides)"
    )
