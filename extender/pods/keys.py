"""How the extender names a pod and reads the few fields every room asks of it: one place, so no
room reaches into another for a pod's key or its start."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

Key = tuple[str, str]  # (namespace, name)


def pod_key(pod: dict[str, Any]) -> Key:
    return pod["metadata"]["namespace"], pod["metadata"]["name"]


def name_of(key: Key) -> str:
    return f"{key[0]}/{key[1]}"


def key_of(name: str) -> Key:
    namespace, _, pod = name.partition("/")
    return namespace, pod


def object_key(obj: dict[str, Any]) -> Key:
    """Any API object's (namespace, name); cluster-scoped objects have namespace ""."""
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def timestamp(text: str | None) -> float:
    """An API timestamp in unix seconds; now where the object has none."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else time.time()
