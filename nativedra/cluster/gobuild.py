"""Build Go programs from the Go module proxy into nativedra's cache, without any prebuilt download.

A generated wrapper module requires the upstream module at an exact version (the proxy refuses
version lists, so `go install module@version` does not work here) and a `tools.go` imports the
main packages, so `go mod tidy` resolves every dependency; each program is then built once and
kept under `~/.cache/nativedra`. A first build takes minutes on 2 cores, so progress is logged.

Nothing floats: every module the build resolves must be at the version the upstream module's own
go.mod states (or one the wrapper replaces on purpose); `go mod tidy` choosing any other, a newer
release of a module upstream never named, fails the build and names it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
HEARTBEAT_S = 30.0

_TOOLS_GO = """//go:build tools

package {package}

import (
{imports}
)
"""


class BinaryError(RuntimeError):
    """A program could not be found or built."""


def cache_root() -> Path:
    return Path(os.environ.get("NATIVEDRA_CACHE_DIR", Path.home() / ".cache" / "nativedra"))


def go_env() -> dict[str, str]:
    return dict(os.environ, CGO_ENABLED="0", GOFLAGS="-buildvcs=false")


def elapsed(started: float) -> str:
    seconds = int(time.monotonic() - started)
    return f"{seconds // 60}m{seconds % 60:02d}s"


def run_go(
    args: list[str], cwd: Path, env: dict[str, str], what: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run go; for a long step (`what`), say every 30 s that it is still going, so a first run that
    builds for minutes never looks hung."""
    go = shutil.which("go")
    if go is None:
        raise BinaryError(
            "Go is needed to build Kubernetes components (or set KUBEBUILDER_ASSETS); `go` is not on PATH"
        )
    started = time.monotonic()
    with subprocess.Popen(
        [go, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        while True:
            try:
                stdout, stderr = process.communicate(timeout=HEARTBEAT_S)
                break
            except subprocess.TimeoutExpired:
                if what:
                    log.info("still %s: %s so far", what, elapsed(started))
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run_go_via_proxy(
    args: list[str], cwd: Path, env: dict[str, str], what: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run go; if only the checksum database is unreachable, retry once with GOSUMDB=off, kept in
    `env` for the steps after (the module proxy is the single source either way; logged)."""
    result = run_go(args, cwd, env, what)
    if result.returncode != 0 and "sum.golang.org" in result.stderr and env.get("GOSUMDB") != "off":
        log.warning("Go checksum database unreachable; building with GOSUMDB=off (proxy only)")
        env["GOSUMDB"] = "off"
        result = run_go(args, cwd, env, what)
    return result


def run_go_checked(args: list[str], cwd: Path, env: dict[str, str], what: str | None = None) -> str:
    """`run_go_via_proxy`, failing unless go succeeded. Returns stdout."""
    result = run_go_via_proxy(args, cwd, env, what)
    if result.returncode != 0:
        raise BinaryError(f"`go {' '.join(args)}` failed in {cwd}:\n{result.stderr[-4000:]}")
    return result.stdout


def download(module: str, version: str, cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    """`go mod download -json module@version`: where its source (`Dir`) and go.mod (`GoMod`) are."""
    cwd.mkdir(parents=True, exist_ok=True)
    return dict(json.loads(run_go_checked(["mod", "download", "-json", f"{module}@{version}"], cwd, env)))


def fetch_go_mod(module: str, version: str, cwd: Path, env: dict[str, str]) -> str:
    """The go.mod of `module@version`, also when this Go is too old to download the module itself
    (the proxy's .mod comes first; `go mod download` then reports "requires go >= X")."""
    cwd.mkdir(parents=True, exist_ok=True)
    result = run_go_via_proxy(["mod", "download", "-json", f"{module}@{version}"], cwd, env)
    try:
        go_mod = json.loads(result.stdout or "{}").get("GoMod")
    except ValueError:
        go_mod = None
    if not go_mod or not Path(go_mod).is_file():
        said = (result.stdout + result.stderr)[-4000:]
        raise BinaryError(f"go.mod of {module}@{version} could not be fetched:\n{said}")
    return Path(go_mod).read_text()


def go_mod_cache(env: Mapping[str, str]) -> str:
    return env.get("GOMODCACHE") or str(Path(env.get("GOPATH") or Path.home() / "go") / "pkg" / "mod")


_REQUIRE_BLOCK = re.compile(r"^require\s*\((.*?)^\)", re.MULTILINE | re.DOTALL)
_REQUIRE_LINE = re.compile(r"^require\s+(\S+)\s+(v\S+)", re.MULTILINE)
_REPLACE_BLOCK = re.compile(r"^replace\s*\((.*?)^\)", re.MULTILINE | re.DOTALL)
_REPLACE_LINE = re.compile(r"^replace\s+(\S+)", re.MULTILINE)


def requirements(go_mod: str) -> dict[str, str]:
    """Module path -> version of every `require` in a go.mod, one-line or in blocks."""
    found = dict(_REQUIRE_LINE.findall(go_mod))
    for block in _REQUIRE_BLOCK.findall(go_mod):
        for line in block.splitlines():
            parts = line.split("//", 1)[0].split()
            if len(parts) == 2:
                found[parts[0]] = parts[1]
    return found


def replaced(go_mod: str) -> set[str]:
    found = set(_REPLACE_LINE.findall(go_mod))
    for block in _REPLACE_BLOCK.findall(go_mod):
        found |= {parts[0] for line in block.splitlines() if (parts := line.split("//", 1)[0].split())}
    return found


def floated(resolved: str, upstream: str, wrapper: str) -> dict[str, tuple[str, str | None]]:
    """Modules of the tidied wrapper `resolved` at a version upstream's go.mod does not state
    (module -> (resolved, upstream's or None)). What the wrapper requires or either side replaces is
    pinned by that line itself."""
    pinned = replaced(resolved) | replaced(upstream) | set(requirements(wrapper))
    wanted = requirements(upstream)
    return {
        module: (version, wanted.get(module))
        for module, version in requirements(resolved).items()
        if module not in pinned and wanted.get(module) != version
    }


def build_programs(
    src: Path,
    go_mod: str,
    programs: Mapping[str, str],
    bin_dir: Path,
    *,
    env: dict[str, str],
    upstream: str,
    ldflags: str = "-s -w",
) -> None:
    """Build `programs` (binary name -> main package) of the wrapper module `go_mod` into `bin_dir`;
    `upstream` is the go.mod of the module the wrapper requires, whose versions the build keeps."""
    src.mkdir(parents=True, exist_ok=True)
    bin_dir.mkdir(parents=True, exist_ok=True)
    (src / "go.mod").write_text(go_mod)
    imports = "\n".join(f'\t_ "{package}"' for package in sorted(set(programs.values())))
    (src / "tools.go").write_text(_TOOLS_GO.format(package="wrapper", imports=imports))
    log.info("resolving Go modules for %s (module cache: %s)", ", ".join(programs), go_mod_cache(env))
    run_go_checked(["mod", "tidy"], src, env, "resolving modules")
    moved = floated((src / "go.mod").read_text(), upstream, go_mod)
    if moved:
        said = ", ".join(f"{m} {v} (upstream: {u or 'not required'})" for m, (v, u) in sorted(moved.items()))
        raise BinaryError(f"resolving modules for {', '.join(programs)}: versions upstream does not state: {said}")
    for position, (name, package) in enumerate(programs.items(), start=1):
        started = time.monotonic()
        log.info(
            "building %s (%d of %d; first run only, can take minutes on 2 cores; result cached in %s)",
            name,
            position,
            len(programs),
            bin_dir,
        )
        tmp = bin_dir / f".{name}.tmp"
        run_go_checked(
            ["build", "-trimpath", "-ldflags", ldflags, "-o", str(tmp), package], src, env, f"building {name}"
        )
        tmp.replace(bin_dir / name)
        log.info("built %s in %s", name, elapsed(started))


class BuildLock:
    """One build of a cache directory at a time; a concurrent build waits for ours."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "build.lock"

    def __enter__(self) -> BuildLock:
        self._file = self.path.open("w")
        fcntl.flock(self._file, fcntl.LOCK_EX)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._file.close()
