"""Transient per-claim spec files in the dynamic CDI directory (e.g. /var/run/cdi)."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml

from cdi.spec import Spec, to_document
from nativedra.base.fsutil.atomic import (
    TEMP_SUFFIX,
    atomic_write,
    fsync_directory,
    remove_durably,
    staged_write,
    temp_prefix,
)

# Kubernetes UIDs are RFC 4122 UUIDs; nothing else may become part of a file name. Always
# `fullmatch`: `$` also matches before a trailing newline.
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
SPEC_FILE_MODE = 0o644  # runtimes read it; it holds no secrets, and only root may write the directory
# libyaml's dumper writes the same text as the pure-Python one, five times faster (every prepare
# renders a spec); wheels without libyaml fall back to the latter.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
STALE_TEMP_S = 60.0  # a temporary file this old is left by a crash, not by a write in flight (milliseconds)


def is_kubernetes_uid(text: str) -> bool:
    return _UID.fullmatch(text) is not None


def spec_text(spec: Spec) -> str:
    """The file's exact text (validated, lowest cdiVersion): written now and kept to restore it."""
    return yaml.dump(to_document(spec), Dumper=_DUMPER, sort_keys=False)


class SpecStore:
    """One spec file per claim: `<vendor>-<class>_<claimUID>.yaml`."""

    def __init__(self, directory: Path, vendor: str, device_class: str) -> None:
        self.directory = directory
        self.prefix = f"{vendor}-{device_class}_"

    def path_for(self, claim_uid: str) -> Path:
        if not is_kubernetes_uid(claim_uid):
            raise ValueError(f"claim UID {claim_uid!r} is not a Kubernetes UID")
        return self.directory / f"{self.prefix}{claim_uid}.yaml"

    def write(self, claim_uid: str, spec: Spec) -> Path:
        return self.write_text(claim_uid, spec_text(spec))

    def write_text(self, claim_uid: str, text: str) -> Path:
        """Write an already validated spec (e.g. the exact text kept in the checkpoint)."""
        path = self.path_for(claim_uid)
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text.encode(), SPEC_FILE_MODE)
        return path

    @contextlib.contextmanager
    def staged(self, claim_uid: str, text: str) -> Iterator[Callable[[], None]]:
        """The spec durable under a hidden temporary name; the function yielded makes it appear
        (durable after `sync`). Prepare overlaps this fsync with its checkpoint write."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with staged_write(self.path_for(claim_uid), text.encode(), SPEC_FILE_MODE) as publish:
            yield publish

    def sync(self) -> None:
        """Make the files that appeared or went since the last sync durable."""
        fsync_directory(self.directory)

    def remove_stale_temporaries(self, now: float | None = None) -> list[str]:
        """Delete our temporary files left by a crash mid-write; return their names. Young ones
        may belong to a write in flight (a second plugin instance during a rolling update)."""
        if not self.directory.is_dir():
            return []
        cutoff = (time.time() if now is None else now) - STALE_TEMP_S
        stale = []
        pattern = f"{temp_prefix(self.directory / f'{self.prefix}*.yaml')}*{TEMP_SUFFIX}"  # as staged_write names them
        for path in self.directory.glob(pattern):
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_mtime < cutoff:
                    path.unlink()
                    stale.append(path.name)
        return sorted(stale)

    def read_text(self, claim_uid: str) -> str:
        return self.path_for(claim_uid).read_text()

    def remove(self, claim_uid: str) -> bool:
        return remove_durably(self.path_for(claim_uid))

    def exists(self, claim_uid: str) -> bool:
        return self.path_for(claim_uid).is_file()

    def claim_uids(self) -> set[str]:
        """UIDs of every spec file of ours in the directory."""
        if not self.directory.is_dir():
            return set()
        found = set()
        for path in self.directory.glob(f"{self.prefix}*.yaml"):
            uid = path.name.removeprefix(self.prefix).removesuffix(".yaml")
            if is_kubernetes_uid(uid):
                found.add(uid)
        return found

    def remove_orphans(self, owned: set[str]) -> list[str]:
        """Delete spec files whose claim is not in `owned`; return their UIDs."""
        orphans = sorted(self.claim_uids() - owned)
        for uid in orphans:
            self.remove(uid)
        return orphans
