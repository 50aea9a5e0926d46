"""Building Kubernetes from its Go module: the wrapper go.mod and the version pin."""

from __future__ import annotations

import pytest

from nativedra.cluster.binaries import (
    BinaryError,
    go_version_tuple,
    minor_of,
    pinned_version,
    staging_modules,
    toolchain_env,
    wrapper_go_mod,
)

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


def test_a_pre_release_is_pinned_and_its_staging_modules_follow_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """v1.38.0-beta.0 is served before 1.38 ships; its staging modules are v0.38.0-beta.0."""
    for version in ("v1.38.0-beta.0", "v1.38.0-rc.1", "v1.38.0-alpha.3"):
        monkeypatch.setenv("NATIVEDRA_K8S_VERSION", version)
        assert pinned_version() == version
        assert minor_of(version) == 38
    assert "\tk8s.io/api => k8s.io/api v0.38.0-beta.0\n" in wrapper_go_mod("v1.38.0-beta.0", ["k8s.io/api"], "1.27.0")
    for malformed in ("v1.38.0-beta", "v1.38.0-gamma.1", "v1.38.0+build"):
        monkeypatch.setenv("NATIVEDRA_K8S_VERSION", malformed)
        with pytest.raises(BinaryError, match="expected a release like"):
            pinned_version()


def test_a_module_needing_a_newer_go_gets_that_toolchain_the_way_go_switches() -> None:
    """GOTOOLCHAIN names the go line's version when the machine's Go is older (the go command then
    fetches golang.org/toolchain from the module proxy); a caller's own choice is kept."""
    base = {"PATH": "/usr/bin"}
    assert toolchain_env(base, "1.27.0", "go1.26.8") == {**base, "GOTOOLCHAIN": "go1.27.0"}
    assert toolchain_env(base, "1.26.0", "go1.26.8") == base
    assert toolchain_env(base, "1.27", "go1.27.3") == base
    chosen = {**base, "GOTOOLCHAIN": "go1.27.3"}
    assert toolchain_env(chosen, "1.27.0", "go1.26.8") == chosen
    assert toolchain_env({**base, "GOTOOLCHAIN": "local"}, "1.27.0", "go1.26.8")["GOTOOLCHAIN"] == "go1.27.0"
    assert go_version_tuple("go1.27.3 linux/amd64") == (1, 27, 3)
    with pytest.raises(BinaryError, match="not a Go version"):
        go_version_tuple("devel")
