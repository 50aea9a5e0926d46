"""PriorityClasses of a test or benchmark, named uniquely for the run, deleted afterwards."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Hashable, Iterator, Mapping
from typing import TypeVar

from kubernetes import client

Label = TypeVar("Label", bound=Hashable)


@contextlib.contextmanager
def priority_classes(api: client.ApiClient, values: Mapping[Label, int], prefix: str) -> Iterator[dict[Label, str]]:
    """One PriorityClass per value (`<prefix>-<label>-<suffix>`); yields label -> class name."""
    scheduling = client.SchedulingV1Api(api)
    suffix = uuid.uuid4().hex[:6]
    names = {label: f"{prefix}-{label}-{suffix}" for label in values}
    for label, value in values.items():
        scheduling.create_priority_class({"metadata": {"name": names[label]}, "value": value})
    try:
        yield names
    finally:
        for name in names.values():
            with contextlib.suppress(client.ApiException):
                scheduling.delete_priority_class(name)
