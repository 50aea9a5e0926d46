"""Building Kubernetes from its Go module: the wrapper go.mod and the version pin."""

from __future__ import annotations

import pytest

from nativedra.cluster.binaries import BinaryError, pinned_version, staging_modules, wrapper_go_mod

UPSTREAM = """module k8s.io/kubernetes

go 1.26.0

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tgithub.com/other/thing => github.com/other/thing v1.0.0
)
"""


def test_wrapper_replaces_every_staging_module_with_its_published_version() -> None:
    modules = staging_modules(UPSTREAM)
    assert modules == ["k8s.io/api", "k8s.io/client-go"]
    text = wrapper_go_mod("v1.36.2", modules, "1.26.0")
    assert "require k8s.io/kubernetes v1.36.2" in text
    assert "\tk8s.io/api => k8s.io/api v0.36.2\n" in text
    assert "\tk8s.io/client-go => k8s.io/client-go v0.36.2\n" in text
    assert "github.com/other" not in text


def test_version_pin_rejects_old_or_malformed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NATIVEDRA_K8S_VERSION", "v1.33.0")
    with pytest.raises(BinaryError, match=r"1\.34 or newer"):
        pinned_version()
    monkeypatch.setenv("NATIVEDRA_K8S_VERSION", "latest")
    with pytest.raises(BinaryError, match="expected a release like"):
        pinned_version()
    monkeypatch.setenv("NATIVEDRA_K8S_VERSION", "v1.37.2")
    assert pinned_version() == "v1.37.2"
