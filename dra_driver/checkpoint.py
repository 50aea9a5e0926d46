"""The plugin's record of prepared claims: one JSON file, checksummed, replaced atomically.

Every change happens under an exclusive flock (read, modify, write), so two plugin instances
during a rolling update never lose each other's records. A corrupted file (checksum mismatch, bytes
that are not JSON, JSON of another shape) is moved aside with a clear error and the plugin continues
with an empty record, which the start-up repair refills from the CDI specs and the API.
Records are kept parsed between calls and the file is re-read only when another writer changed it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from fsutil.atomic import atomic_write

log = logging.getLogger(__name__)
VERSION = 2
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
    cdi_spec: str | None = None  # the spec file's exact text, to restore a lost file

    def to_json(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "state": self.state.value,
            "devices": self.devices,
            "cdiSpec": self.cdi_spec,
        }

    @classmethod
    def from_json(cls, data: Any) -> ClaimRecord:
        """A record as written by `to_json`; anything else raises ValueError (the file is corrupt)."""
        record = _mapping(data, "a claim record")
        uid, namespace, name, state = (record.get(key) for key in ("uid", "namespace", "name", "state"))
        devices, spec = record.get("devices"), record.get("cdiSpec")
        if not all(isinstance(text, str) for text in (uid, namespace, name, state)) or not isinstance(spec, str | None):
            raise ValueError(f"claim record {uid!r}: uid, namespace, name, state or cdiSpec is not a string")
        if not isinstance(devices, list) or not all(isinstance(device, dict) for device in devices):
            raise ValueError(f"claim record {uid!r}: devices is not a list of objects")
        return cls(str(uid), str(namespace), str(name), ClaimState(str(state)), devices, spec)


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} is a JSON {type(value).__name__}, not an object")
    return value


def boot_id(proc_root: Path = Path("/proc")) -> str:
    try:
        return (proc_root / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return "unknown"


def _canonical(payload: Any) -> str:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"))


def _checksum(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


class Checkpoint:
    def __init__(self, path: Path, node_boot_id: str) -> None:
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")
        self.boot_id = node_boot_id
        self.last_error: str | None = None
        self._cache: tuple[tuple[int, int, int], dict[str, ClaimRecord]] | None = None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _identity(self) -> tuple[int, int, int] | None:
        try:
            info = self.path.stat()
        except FileNotFoundError:
            return None
        return (info.st_ino, info.st_size, info.st_mtime_ns)

    def _read(self) -> dict[str, ClaimRecord]:
        """The current records; re-parsed only if the file changed since we last saw it."""
        identity = self._identity()
        if identity is None:
            return {}
        if self._cache is None or self._cache[0] != identity:
            self._cache = (identity, self._parse())
        return dict(self._cache[1])

    def _parse(self) -> dict[str, ClaimRecord]:
        """Any failure to read the file as our document is corruption (bytes that are not UTF-8,
        JSON of another shape, a wrong checksum): the plugin must keep serving, not crash-loop."""
        try:
            document = _mapping(json.loads(self.path.read_bytes().decode()), "the document")
            if document.get("version") != VERSION:
                raise ValueError(f"unsupported checkpoint version {document.get('version')!r}")
            payload = document.get("payload")
            if document.get("checksum") != _checksum(_canonical(payload)):
                raise ValueError("checksum mismatch")
            claims = _mapping(_mapping(payload, "the payload").get("claims"), "payload.claims")
            return {uid: ClaimRecord.from_json(record) for uid, record in claims.items()}
        except ValueError as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            self.path.replace(aside)
            self.last_error = f"checkpoint {self.path} is corrupted ({error}); moved to {aside}, starting empty"
            log.error(self.last_error)
            return {}

    def _write(self, records: dict[str, ClaimRecord]) -> None:
        body = _canonical({"bootId": self.boot_id, "claims": {uid: r.to_json() for uid, r in records.items()}})
        text = f'{{"version":{VERSION},"checksum":"{_checksum(body)}","payload":{body}}}'
        self._cache = None  # if writing fails, the next read goes back to the file
        atomic_write(self.path, text.encode(), 0o600)
        identity = self._identity()
        self._cache = (identity, dict(records)) if identity else None

    def read(self) -> dict[str, ClaimRecord]:
        with self._locked():
            return self._read()

    def update(self, change: Callable[[dict[str, ClaimRecord]], T]) -> T:
        """Apply `change` to the current records and persist them, atomically and exclusively."""
        with self._locked():
            records = self._read()
            try:
                result = change(records)
            except BaseException:
                self._cache = None  # `change` may have modified cached records before failing
                raise
            self._write(records)
            return result
