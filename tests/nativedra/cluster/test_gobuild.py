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

# Records each call; fails like an unreachable sum.golang.org unless GOSUMDB=off; `build -o` makes the file.
FAKE_GO = """#!/bin/sh
echo "$* GOSUMDB=$GOSUMDB CGO=$CGO_ENABLED" >> "$GO_CALLS"
if [ -n "$FAIL_SUMDB" ] && [ "$GOSUMDB" != "off" ]; then
  echo "verifying module: Get https://sum.golang.org/lookup: dial tcp: no route" >&2; exit 1
fi
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
    build_programs(src, "module wrapper\n", programs, bin_dir, env=gobuild.go_env())
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
