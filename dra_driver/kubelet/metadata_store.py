"""Device metadata files on the host, one directory per prepared claim under the plugin's data
directory: `<data dir>/dra-device-metadata/<claimUID>/<request>.json`.

The host layout is ours (the container sees each file at the standard path through a read-only
CDI bind mount). The helper keys its directories by namespace and claim name; keying by UID, like
the CDI specs, lets unprepare and the start-up repair find a claim's files from the UID alone, and
only a validated UID and a DNS-label request name ever become part of a path. The data directory
is not a tmpfs, but the files are still restored from the checkpoint like the specs.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from cdi.store import is_kubernetes_uid
from nativedra.base.fsutil.atomic import atomic_write, fsync_directory, staged_write

SUBDIR = "dra-device-metadata"  # the helper's name for the same directory (kubeletplugin/metadata.go)
FILE_MODE = 0o644  # the container's user reads it through the bind mount; it holds no secret
_REQUEST = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class MetadataStore:
    """The metadata files of each prepared claim: `{request: text}` per claim UID."""

    def __init__(self, data_dir: Path) -> None:
        self.directory = data_dir.absolute() / SUBDIR  # CDI mounts need an absolute host path

    def claim_dir(self, claim_uid: str) -> Path:
        if not is_kubernetes_uid(claim_uid):
            raise ValueError(f"claim UID {claim_uid!r} is not a Kubernetes UID")
        return self.directory / claim_uid

    def path_for(self, claim_uid: str, request: str) -> Path:
        if not _REQUEST.fullmatch(request):
            raise ValueError(f"request name {request!r} is not a DNS label")
        return self.claim_dir(claim_uid) / f"{request}.json"

    @contextlib.contextmanager
    def staged(self, claim_uid: str, files: Mapping[str, str]) -> Iterator[Callable[[], None]]:
        """Every file durable under a hidden temporary name; the function yielded makes them all
        appear (durable after `sync`). Temporary files not published are removed."""
        paths = {self.path_for(claim_uid, request): text for request, text in files.items()}
        self.claim_dir(claim_uid).mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as stack:
            publishers = [
                stack.enter_context(staged_write(path, text.encode(), FILE_MODE)) for path, text in paths.items()
            ]

            def publish() -> None:
                for publish_one in publishers:
                    publish_one()

            yield publish

    def sync(self, claim_uid: str) -> None:
        """Make the claim's published files and its directory durable."""
        claim_dir = self.claim_dir(claim_uid)
        if claim_dir.is_dir():
            fsync_directory(claim_dir)
            fsync_directory(self.directory)

    def read(self, claim_uid: str) -> dict[str, str]:
        """The claim's files as they are on disk, by request."""
        claim_dir = self.claim_dir(claim_uid)
        if not claim_dir.is_dir():
            return {}
        found = {}
        for path in claim_dir.glob("*.json"):
            request = path.name.removesuffix(".json")
            if _REQUEST.fullmatch(request):
                found[request] = path.read_text()
        return found

    def restore(self, claim_uid: str, files: Mapping[str, str]) -> bool:
        """Write back each file that is missing or differs from `files` (the checkpoint's copy);
        True if any was written. Identical files are left alone: prepare twice, same files."""
        on_disk = self.read(claim_uid)
        changed = {request: text for request, text in files.items() if on_disk.get(request) != text}
        if not changed:
            return False
        self.claim_dir(claim_uid).mkdir(parents=True, exist_ok=True)
        for request, text in changed.items():
            atomic_write(self.path_for(claim_uid, request), text.encode(), FILE_MODE)
        fsync_directory(self.directory)
        return True

    def remove(self, claim_uid: str) -> bool:
        """Delete the claim's files (missing is fine); True if there were any."""
        claim_dir = self.claim_dir(claim_uid)
        if not claim_dir.exists():
            return False
        shutil.rmtree(claim_dir)
        fsync_directory(self.directory)
        return True

    def claim_uids(self) -> set[str]:
        if not self.directory.is_dir():
            return set()
        return {path.name for path in self.directory.iterdir() if is_kubernetes_uid(path.name) and path.is_dir()}

    def remove_orphans(self, owned: set[str]) -> list[str]:
        """Delete the files of claims not in `owned`; return their UIDs."""
        orphans = sorted(self.claim_uids() - owned)
        for uid in orphans:
            self.remove(uid)
        return orphans
