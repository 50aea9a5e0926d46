"""The names in nativedra/base/kube/names.py are the ones users and the shipped manifests spell out (the plugin
DaemonSet's node label: tests/manifests/test_plugin_daemonset.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

from nativedra.base.kube.names import CDI_KIND, DRIVER_NAME, FRACTION_CLASS, GPU_CLASS, MIG_CLASS, SHARE_CLASS

BASE = Path(__file__).resolve().parents[4] / "manifests" / "base"


def test_the_wire_names_are_the_documented_ones() -> None:
    assert DRIVER_NAME == "gpu.nativedra.dev", "users' CEL selectors and DeviceClasses name this driver"
    assert CDI_KIND == "k8s.gpu.nativedra.dev/claim", "runtimes resolve the CDI device ids by this kind"


def test_the_shipped_device_classes_are_the_named_ones() -> None:
    classes = [d for d in yaml.safe_load_all((BASE / "deviceclasses.yaml").read_text()) if d]
    assert sorted(c["metadata"]["name"] for c in classes) == sorted((GPU_CLASS, FRACTION_CLASS, MIG_CLASS, SHARE_CLASS))
    for device_class in classes:
        (selector,) = device_class["spec"]["selectors"]
        assert f"device.driver == '{DRIVER_NAME}'" in selector["cel"]["expression"]
