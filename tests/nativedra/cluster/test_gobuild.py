"""Building Go programs, with a stand-in `go` on PATH (no Go toolchain, no network): the wrapper
module and its imports, the checksum-database fallback, and where the cache lives."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from nativedra.cluster import gobuild
from nativedra.cluster.gobuild import BinaryError, build_programs, cache_root, go_mod_cache, run_go_checked

# Records each call; fails like an unreachable sum.golang.org unless GOSUMDB=off; `build -o` makes the file;
# `mod tidy` writes $TIDY_GO_MOD as the go.mod it resolved, when set.
FAKE_GO = """#!/bin/sh
echo "$* GOSUMDB=$GOSUMDB CGO=$CGO_ENABLED" >> "$GO_CALLS"
if [ -n "$FAIL_SUMDB" ] && [ "$GOSUMDB" != "off" ]; then
  echo "verifying module: Get https://sum.golang.org/lookup: dial tcp: no route" >&2; exit 1
fi
if [ "$1" = mod ] && [ "$2" = tidy ] && [ -n "$TIDY_GO_MOD" ]; then cp "$TIDY_GO_MOD" go.mod; fi
if [ "$1" = build ]; then
  while [ "$#" -gt 0 ]; do [ "$1" = -o ] && printf 'binary' > "$2"; shift; done
fi
echo ok
"""


@pytest.fixture
def go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake `go` first on PATH; returns the file its calls are recorded in."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    (bin_dir / "go").write_text(FAKE_GO)
    (bin_dir / "go").chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("GO_CALLS", str(calls))
    monkeypatch.delenv("GOSUMDB", raising=False)
    return calls


def test_programs_are_built_from_a_wrapper_module_that_imports_each_package_once(go: Path, tmp_path: Path) -> None:
    programs = {"kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver", "kubectl": "k8s.io/kubectl"}
    programs["kubectl-again"] = "k8s.io/kubectl"
    src, bin_dir = tmp_path / "src", tmp_path / "bin"
    build_programs(src, "module wrapper\n", programs, bin_dir, env=gobuild.go_env(), upstream="module upstream\n")
    assert (src / "go.mod").read_text() == "module wrapper\n"
    tools = (src / "tools.go").read_text()
    assert tools.startswith("//go:build tools\n\npackage wrapper\n")
    imported = [line.strip() for line in tools.splitlines() if line.startswith("\t_ ")]
    assert imported == ['_ "k8s.io/kubectl"', '_ "k8s.io/kubernetes/cmd/kube-apiserver"']
    assert sorted(p.name for p in bin_dir.iterdir()) == sorted(programs), "no temporary file left behind"
    calls = go.read_text().splitlines()
    assert calls[0].startswith("mod tidy ")
    assert all("CGO=0" in call for call in calls), "static binaries"
    assert [call.split()[0] for call in calls[1:]] == ["build"] * 3


UPSTREAM_GO_MOD = """module k8s.io/kubernetes

go 1.26.0

require (
\tgithub.com/spf13/cobra v1.10.2
\tk8s.io/api v0.0.0 // indirect comment
)

require go.opentelemetry.io/otel v1.40.0 // indirect

replace k8s.io/api => ./staging/src/k8s.io/api
"""
WRAPPER_GO_MOD = "module wrapper\n\nrequire k8s.io/kubernetes v1.37.2\n\nreplace k8s.io/api => k8s.io/api v0.37.2\n"


def tidied(*extra: str) -> str:
    lines = ["\tk8s.io/kubernetes v1.37.2", "\tgithub.com/spf13/cobra v1.10.2 // indirect", "\tk8s.io/api v0.37.2"]
    lines += ["\tgo.opentelemetry.io/otel v1.40.0 // indirect", *extra]
    return "module wrapper\n\nrequire (\n" + "\n".join(lines) + "\n)\n\nreplace k8s.io/api => k8s.io/api v0.37.2\n"


def test_a_resolution_at_upstreams_versions_has_nothing_floated() -> None:
    assert gobuild.requirements(UPSTREAM_GO_MOD) == {
        "github.com/spf13/cobra": "v1.10.2",
        "k8s.io/api": "v0.0.0",
        "go.opentelemetry.io/otel": "v1.40.0",
    }
    assert gobuild.replaced(UPSTREAM_GO_MOD) == {"k8s.io/api"}
    assert gobuild.floated(tidied(), UPSTREAM_GO_MOD, WRAPPER_GO_MOD) == {}


def test_a_module_tidy_moved_or_added_is_named() -> None:
    moved = tidied().replace("cobra v1.10.2", "cobra v1.11.0")
    assert gobuild.floated(moved, UPSTREAM_GO_MOD, WRAPPER_GO_MOD) == {"github.com/spf13/cobra": ("v1.11.0", "v1.10.2")}
    added = tidied("\texample.com/new v0.1.0 // indirect")
    assert gobuild.floated(added, UPSTREAM_GO_MOD, WRAPPER_GO_MOD) == {"example.com/new": ("v0.1.0", None)}


def test_a_build_whose_modules_floated_fails_before_building(
    go: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolved = tmp_path / "resolved.mod"
    resolved.write_text(tidied().replace("cobra v1.10.2", "cobra v1.11.0"))
    monkeypatch.setenv("TIDY_GO_MOD", str(resolved))
    programs = {"kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver"}
    with pytest.raises(BinaryError, match=r"github\.com/spf13/cobra v1\.11\.0 \(upstream: v1\.10\.2\)"):
        build_programs(
            tmp_path / "src", WRAPPER_GO_MOD, programs, tmp_path / "bin", env=gobuild.go_env(), upstream=UPSTREAM_GO_MOD
        )
    assert not any(call.startswith("build") for call in go.read_text().splitlines()), "nothing is built"


def test_an_unreachable_checksum_database_is_retried_once_without_it(
    go: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIL_SUMDB", "1")
    env = gobuild.go_env()
    assert run_go_checked(["mod", "tidy"], tmp_path, env) == "ok\n"
    assert [line.split()[-2] for line in go.read_text().splitlines()] == ["GOSUMDB=", "GOSUMDB=off"]
    assert env["GOSUMDB"] == "off", "later steps of the same build skip it too"


def test_a_failure_that_is_not_the_checksum_database_names_the_command(go: Path, tmp_path: Path) -> None:
    env = gobuild.go_env()
    (tmp_path / "fake-bin" / "go").write_text("#!/bin/sh\necho 'package nope is not in std' >&2\nexit 1\n")
    with pytest.raises(BinaryError, match=r"`go build ./x` failed in .*\npackage nope is not in std"):
        run_go_checked(["build", "./x"], tmp_path, env)


def test_without_go_the_error_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BinaryError, match="KUBEBUILDER_ASSETS"):
        run_go_checked(["version"], tmp_path, {})


def test_the_cache_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NATIVEDRA_CACHE_DIR", str(tmp_path / "cache"))
    assert cache_root() == tmp_path / "cache"
    assert go_mod_cache({"GOMODCACHE": "/m", "GOPATH": "/g"}) == "/m"
    assert go_mod_cache({"GOPATH": "/g"}) == "/g/pkg/mod"
    assert go_mod_cache({}) == str(Path.home() / "go" / "pkg" / "mod")


def test_elapsed_reads_as_minutes_and_seconds() -> None:
    assert gobuild.elapsed(time.monotonic() - 125) == "2m05s"
