"""The wire format of the in-tree protos matches the kubelet's, and the generated code is current."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from dra_driver.proto import generate
from dra_driver.proto.gen.dra.v1 import api_pb2 as dra_v1
from dra_driver.proto.gen.dra.v1beta1 import api_pb2 as dra_v1beta1
from dra_driver.proto.gen.dra_health.v1alpha1 import api_pb2 as health
from dra_driver.proto.gen.pluginregistration.v1 import api_pb2 as registration


def _numbers(message: Any) -> dict[str, int]:
    return {field.name: field.number for field in message.DESCRIPTOR.fields}


def test_wire_format_matches_the_kubelet_api() -> None:
    assert dra_v1.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1"
    assert dra_v1beta1.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1beta1"
    assert _numbers(dra_v1.Device) == {
        "request_names": 1,
        "pool_name": 2,
        "device_name": 3,
        "cdi_device_ids": 4,
        "share_id": 5,
    }
    assert "share_id" not in _numbers(dra_v1beta1.Device)
    assert _numbers(dra_v1.Claim) == {"namespace": 1, "uid": 2, "name": 3}
    assert _numbers(dra_v1.NodePrepareResourceResponse) == {"devices": 1, "error": 2}
    assert _numbers(registration.PluginInfo) == {"type": 1, "name": 2, "endpoint": 3, "supported_versions": 4}
    assert registration.DESCRIPTOR.package == "pluginregistration"
    assert _numbers(health.DeviceHealth) == {
        "device": 1,
        "health": 2,
        "last_updated_time": 3,
        "health_check_timeout_seconds": 4,
        "message": 5,
    }
    assert dra_v1.DESCRIPTOR.services_by_name["DRAPlugin"].full_name == "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    assert health.DESCRIPTOR.services_by_name["DRAResourceHealth"].full_name == "v1alpha1.DRAResourceHealth"


def test_generated_code_is_current() -> None:
    assert generate.main(["--check"]) == 0


def test_stale_code_names_the_versions_compared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    committed = tmp_path / "gen"
    shutil.copytree(generate.GEN, committed, ignore=shutil.ignore_patterns("__pycache__"))
    module = next(committed.rglob("*_pb2_grpc.py"))
    text = re.sub(r"GRPC_GENERATED_VERSION = '[^']+'", "GRPC_GENERATED_VERSION = '1.0.0'", module.read_text())
    module.write_text(text)
    monkeypatch.setattr(generate, "GEN", committed)
    problem = generate.check()
    assert problem is not None
    assert f"grpcio-tools {importlib.metadata.version('grpcio-tools')} (the locked one)" in problem
    assert "1.0.0" in problem


def test_tools_other_than_the_locked_ones_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock = tmp_path / "dev.txt"
    lock.write_text("grpcio-tools==0.1 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    monkeypatch.setattr(generate, "LOCK", lock)
    assert generate.locked_tools_version(lock) == "0.1"
    problem = generate.check()
    assert problem is not None and "says 0.1" in problem and "make venv" in problem


def test_pyproject_floors_admit_only_runtimes_the_generated_code_accepts() -> None:
    """The generated modules refuse a grpcio older than the one they were made for and a protobuf
    older than their protoc's: pyproject.toml's ranges must not let a user install either."""
    project = tomllib.loads((generate.REPO / "pyproject.toml").read_text())["project"]
    dependencies = [Requirement(d) for d in project["dependencies"]]
    floors = {r.name: min(Version(s.version) for s in r.specifier if s.operator == ">=") for r in dependencies}
    grpc_version = generate.generated_version(generate.GEN)
    assert grpc_version is not None and "," not in grpc_version, "every module comes from one grpcio-tools"
    assert floors["grpcio"] >= Version(grpc_version)
    stated = (
        re.search(r"^# Protobuf Python Version: (\S+)", p.read_text(), re.M) for p in generate.GEN.rglob("*_pb2.py")
    )
    protobuf_versions = {Version(m[1]) for m in stated if m}
    assert protobuf_versions and floors["protobuf"] >= max(protobuf_versions)
