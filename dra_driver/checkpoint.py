"""The plugin's record of prepared claims: one JSON file, checksummed, replaced atomically.

Every change happens under an exclusive flock (read, modify, write), so two plugin instances
during a rolling update never lose each other's records. A corrupted file (checksum mismatch,
bad JSON) is moved aside with a clear error and the plugin continues with an empty record.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from cdi.atomic import atomic_write

log = logging.getLogger(__name__)
VERSION = 1
T = TypeVar("T")


class ClaimState(StrEnum):
    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"


@dataclass
class ClaimRecord:
    uid: str
    namespace: str
    name: str
    state: ClaimState
    devices: list[dict[str, Any]] = field(default_factory=list)  # the answer given to the kubelet
    cdi_spec: dict[str, Any] | None = None  # the spec document, to restore a lost file


def boot_id(proc_root: Path = Path("/proc")) -> str:
    try:
        return (proc_root / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return "unknown"


def _checksum(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class Checkpoint:
    def __init__(self, path: Path, node_boot_id: str) -> None:
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")
        self.boot_id = node_boot_id
        self.last_error: str | None = None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> dict[str, ClaimRecord]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        try:
            document = json.loads(text)
            payload = {"bootId": document["bootId"], "claims": document["claims"]}
            if document.get("version") != VERSION:
                raise ValueError(f"unsupported checkpoint version {document.get('version')!r}")
            if document.get("checksum") != _checksum(payload):
                raise ValueError("checksum mismatch")
            return {
                uid: ClaimRecord(**{**record, "state": ClaimState(record["state"])})
                for uid, record in document["claims"].items()
            }
        except (ValueError, KeyError, TypeError) as error:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            self.path.replace(aside)
            self.last_error = f"checkpoint {self.path} is corrupted ({error}); moved to {aside}, starting empty"
            log.error(self.last_error)
            return {}

    def _write(self, records: dict[str, ClaimRecord]) -> None:
        claims = {uid: {**asdict(record), "state": record.state.value} for uid, record in sorted(records.items())}
        payload = {"bootId": self.boot_id, "claims": claims}
        document = {"version": VERSION, **payload, "checksum": _checksum(payload)}
        # Insertion order is kept so a restored CDI spec is byte-identical; the checksum is canonical.
        atomic_write(self.path, json.dumps(document, indent=1).encode(), 0o600)

    def read(self) -> dict[str, ClaimRecord]:
        with self._locked():
            return self._read()

    def update(self, change: Callable[[dict[str, ClaimRecord]], T]) -> T:
        """Apply `change` to the current records and persist them, atomically and exclusively."""
        with self._locked():
            records = self._read()
            result = change(records)
            self._write(records)
            return result
