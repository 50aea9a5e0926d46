"""Device selectors (DeviceClass and request CEL) evaluated as the DRA allocator would.

Compiled once per expression. Results are cached per expression and per "signature" of a device:
the values of just the attributes the expression reads (found in its text), so thousands of
identical GPUs cost one evaluation. An expression the library cannot compile matches every device
(the scheduler's own DRA filter still runs first); a runtime error (missing attribute) is no match,
as for the real allocator.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from decimal import Decimal
from typing import Any

import cel
from kubernetes.utils import parse_quantity

log = logging.getLogger(__name__)
_REFERENCE = re.compile(r"""device\.(attributes|capacity)\[\s*['"]([^'"]+)['"]\s*\]\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)""")
_ANY_DEVICE_MAP = re.compile(r"device\.(attributes|capacity)")


def _quantity(text: str) -> dict[str, str]:
    return {"__quantity": str(parse_quantity(text))}


def _semver(text: str) -> dict[str, str]:
    return {"__semver": text}


def _comparable(value: Any) -> Any:
    if isinstance(value, dict) and "__quantity" in value:
        return Decimal(value["__quantity"])
    if isinstance(value, dict) and "__semver" in value:
        return tuple(int(part) for part in value["__semver"].split("-")[0].split("."))
    return value


def _compare_to(left: Any, right: Any) -> int:
    a, b = _comparable(left), _comparable(right)
    return int(a > b) - int(a < b)


def _context() -> cel.Context:
    context = cel.Context()
    context.add_function("quantity", _quantity)
    context.add_function("semver", _semver)
    context.add_function("compareTo", _compare_to)
    context.add_function("isGreaterThan", lambda a, b: _compare_to(a, b) > 0)
    context.add_function("isLessThan", lambda a, b: _compare_to(a, b) < 0)
    context.add_function("asInteger", lambda q: int(_comparable(q)))
    return context


def device_view(driver: str, device: dict[str, Any]) -> dict[str, Any]:
    """A published device in the shape CEL selectors see (`device.attributes['domain'].name`)."""
    attributes: dict[str, dict[str, Any]] = {}
    for key, value in (device.get("attributes") or {}).items():
        domain, name = key.rsplit("/", 1) if "/" in key else (driver, key)
        kind, raw = next(iter(value.items()))
        attributes.setdefault(domain, {})[name] = _semver(raw) if kind == "version" else raw
    capacity: dict[str, dict[str, Any]] = {}
    for key, value in (device.get("capacity") or {}).items():
        domain, name = key.rsplit("/", 1) if "/" in key else (driver, key)
        capacity.setdefault(domain, {})[name] = _quantity(value["value"])
    return {
        "driver": driver,
        "attributes": attributes,
        "capacity": capacity,
        "allowMultipleAllocations": bool(device.get("allowMultipleAllocations")),
    }


class Selectors:
    """Thread-safe compiled-expression and result cache."""

    def __init__(self) -> None:
        self._programs: dict[str, Any] = {}
        self._references: dict[str, list[tuple[str, str, str]] | None] = {}
        self._results: dict[tuple[str, str], bool] = {}
        self._lock = threading.Lock()
        self._context = _context()

    def _compile(self, expression: str) -> Any:
        if expression not in self._programs:
            try:
                self._programs[expression] = cel.compile(expression)
            except (ValueError, RuntimeError) as error:
                log.warning("CEL selector not understood, treated as matching every device: %s (%s)", expression, error)
                self._programs[expression] = None
            found = _REFERENCE.findall(expression)
            leftover = _REFERENCE.sub("", expression)
            self._references[expression] = found if not _ANY_DEVICE_MAP.search(leftover) else None
        return self._programs[expression]

    def _signature(self, expression: str, view: dict[str, Any]) -> str:
        references = self._references[expression]
        if references is None:
            return json.dumps(view, sort_keys=True, default=str)
        picked = [view["driver"], view["allowMultipleAllocations"]]
        for section, domain, name in references:
            picked.append(view[section].get(domain, {}).get(name))
        return json.dumps(picked, sort_keys=True, default=str)

    def matches(self, expression: str, view: dict[str, Any]) -> bool:
        with self._lock:
            program = self._compile(expression)
            if program is None:
                return True
            key = (expression, self._signature(expression, view))
            cached = self._results.get(key)
            if cached is not None:
                return cached
            self._context.add_variable("device", view)
            try:
                result = program.execute(self._context) is True
            except (KeyError, ValueError, TypeError, RuntimeError):
                result = False
            self._results[key] = result
            return result

    def all_match(self, expressions: list[str], view: dict[str, Any]) -> bool:
        return all(self.matches(expression, view) for expression in expressions)
