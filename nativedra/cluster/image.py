"""Build the nativedra image with podman, where no registry may be reachable.

The Dockerfile takes its base as a build argument. When the ordinary base cannot be pulled, a
Debian bookworm base with python3 is built from Debian's packages (debootstrap, as apt is
configured) and imported once; the image is then built on it and saved as an OCI archive that a
node's container runtime imports. Bases and archives are cached under `~/.cache/nativedra/images`.

podman runs with a containers.conf of its own (host network, runc, rlimits no higher than the hard
limits), because machines like CI's lack CAP_SYS_RESOURCE and have a hybrid cgroup layout.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from nativedra.cluster.gobuild import BinaryError, BuildLock, cache_root

log = logging.getLogger(__name__)

REGISTRY_BASE = "docker.io/library/python:3.11-slim-bookworm"
LOCAL_BASE = "localhost/nativedra-base:bookworm"
IMAGE_NAME = "localhost/nativedra"
DEBIAN_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
PULL_TIMEOUT_S = 30
# What the Dockerfile copies: the image's tag is a hash of exactly these, so an unchanged tree
# reuses the cached archive and any source change builds a new image.
IMAGE_SOURCES = (
    "Dockerfile",
    ".dockerignore",
    "pyproject.toml",
    "requirements",
    "README.md",
    "nativedra",
    "dra_driver",
    "cdi",
    "extender",
    "manifests",
)
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
_CONTAINERS_CONF = """# Written by nativedra: containers on a machine without CAP_SYS_RESOURCE (rlimits at most the hard
# limits), a hybrid cgroup layout (runc, not crun) and no container networking set up.
[containers]
netns = "host"
default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]

[engine]
runtime = "runc"
"""


def images_dir() -> Path:
    return cache_root() / "images"


def podman_env() -> dict[str, str]:
    """podman's environment: our containers.conf unless the caller set one."""
    if "CONTAINERS_CONF" in os.environ:
        return dict(os.environ)
    import resource  # noqa: PLC0415 - Unix only, and only needed here

    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 1048576)
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768)
    path = images_dir() / "containers.conf"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = _CONTAINERS_CONF.format(nofile=nofile, nproc=nproc)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return dict(os.environ, CONTAINERS_CONF=str(path))


def _run(args: list[str], what: str, env: dict[str, str] | None = None, timeout: float | None = None) -> str:
    try:
        result = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    except FileNotFoundError:
        raise BinaryError(f"{what}: `{args[0]}` is not installed (Debian: apt-get install {args[0]})") from None
    if result.returncode != 0:
        raise BinaryError(f"{what}: `{' '.join(args)}` exited {result.returncode}:\n{result.stderr[-3000:]}")
    return result.stdout


def image_exists(name: str) -> bool:
    return subprocess.run(["podman", "image", "exists", name], env=podman_env(), check=False).returncode == 0


def _can_pull(name: str) -> bool:
    try:
        pulled = subprocess.run(
            ["podman", "pull", "--quiet", name],
            capture_output=True,
            env=podman_env(),
            timeout=PULL_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return pulled.returncode == 0


def local_base() -> str:
    """A Debian bookworm image with python3, from Debian's packages (once; about 2 minutes)."""
    if image_exists(LOCAL_BASE):
        return LOCAL_BASE
    with BuildLock(images_dir()):
        if image_exists(LOCAL_BASE):
            return LOCAL_BASE
        log.info("building the Debian %s base image with debootstrap (first run only, about 2 minutes)", DEBIAN_SUITE)
        with tempfile.TemporaryDirectory(dir=images_dir(), prefix="rootfs-") as tmp:
            root = Path(tmp) / "rootfs"
            _run(["debootstrap", "--variant=minbase", DEBIAN_SUITE, str(root)], "debootstrap")
            _run(
                ["chroot", str(root), "apt-get", "install", "--yes", "--no-install-recommends", *BASE_PACKAGES],
                "installing python3 in the base",
                env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"),
            )
            _run(["chroot", str(root), "apt-get", "clean"], "cleaning the base")
            shutil.rmtree(root / "var" / "lib" / "apt" / "lists", ignore_errors=True)
            tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
            try:
                imported = subprocess.run(
                    ["podman", "import", "-", LOCAL_BASE],
                    stdin=tar.stdout,
                    capture_output=True,
                    env=podman_env(),
                    check=False,
                )
            finally:
                tar.wait()
            if imported.returncode != 0 or tar.returncode != 0:
                raise BinaryError(f"importing the base image failed: {imported.stderr.decode(errors='replace')}")
    return LOCAL_BASE


@functools.cache
def base_image() -> str:
    """The ordinary base when a registry answers, else the locally built one."""
    if image_exists(REGISTRY_BASE) or _can_pull(REGISTRY_BASE):
        return REGISTRY_BASE
    log.info("%s cannot be pulled; using a base built from Debian's packages", REGISTRY_BASE)
    return local_base()


def source_digest(repo: Path) -> str:
    """A hash of the files the Dockerfile copies (names and contents), in a stable order."""
    digest = hashlib.sha256()
    for name in IMAGE_SOURCES:
        top = repo / name
        paths = sorted(p for p in top.rglob("*") if p.is_file()) if top.is_dir() else [top]
        for path in paths:
            if "__pycache__" in path.parts or not path.exists():
                continue
            digest.update(str(path.relative_to(repo)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build_image(repo: Path) -> tuple[str, Path]:
    """Build the image of the tree at `repo` (once per source digest); returns its name and an OCI
    archive of it for a container runtime to import."""
    tag = f"{IMAGE_NAME}:{source_digest(repo)}"
    archive = images_dir() / f"nativedra-{tag.rsplit(':', 1)[1]}.tar"
    if archive.is_file():
        return tag, archive
    base = base_image()
    with BuildLock(images_dir()):
        if archive.is_file():
            return tag, archive
        log.info("building %s on %s", tag, base)
        mounts = ["--volume", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"] if CA_BUNDLE.is_file() else []
        _run(
            ["podman", "build", "--build-arg", f"BASE={base}", *mounts, "--tag", tag, str(repo)],
            "podman build",
            env=podman_env(),
        )
        tmp = archive.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        _save(tag, tmp)
        tmp.replace(archive)
        _prune_older_than(archive)
    return tag, archive


KEEP_IMAGES = 3  # source trees differ between branches and runs; older builds are dropped


def _prune_older_than(newest: Path) -> None:
    archives = sorted(images_dir().glob("nativedra-*.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in [a for a in archives if a != newest and not a.name.startswith("nativedra-pause")][KEEP_IMAGES - 1 :]:
        digest = old.name.removeprefix("nativedra-").removesuffix(".tar")
        subprocess.run(["podman", "rmi", f"{IMAGE_NAME}:{digest}"], capture_output=True, env=podman_env(), check=False)
        old.unlink(missing_ok=True)


def _save(tag: str, path: Path) -> None:
    # docker-archive keeps the tag in its manifest, which `ctr images import` names the image by.
    _run(["podman", "save", "--format", "docker-archive", "--output", str(path), tag], "podman save", env=podman_env())


def build_pause_image() -> tuple[str, Path]:
    """A pod sandbox image (the registry's pause image cannot be pulled here): the base with a
    process that only waits. containerd stops sandboxes with SIGKILL, so no signal handling is needed."""
    tag = "localhost/nativedra-pause:1"
    archive = images_dir() / "nativedra-pause-1.tar"
    if archive.is_file():
        return tag, archive
    base = base_image()
    with BuildLock(images_dir()):
        if not archive.is_file():
            with tempfile.TemporaryDirectory() as context:
                (Path(context) / "Containerfile").write_text(f'FROM {base}\nCMD ["sleep", "infinity"]\n')
                built = subprocess.run(
                    ["podman", "build", "--tag", tag, context],
                    capture_output=True,
                    text=True,
                    env=podman_env(),
                    check=False,
                )
            if built.returncode != 0:
                raise BinaryError(f"building the pause image failed:\n{built.stderr[-2000:]}")
            tmp = archive.with_suffix(".tmp")
            tmp.unlink(missing_ok=True)
            _save(tag, tmp)
            tmp.replace(archive)
    return tag, archive
