"""Device selectors (DeviceClass and request CEL) evaluated as the DRA allocator would.

Compiled once per expression. Results are cached per expression and per "signature" of a device:
the values of just the attributes the expression reads (found in its text), so thousands of
identical GPUs cost one evaluation. A runtime error (missing attribute) is no match, as for the
real allocator.

The extender only narrows what the scheduler's own DRA allocator will check again, so wherever
this evaluator cannot give the API server's answer cheaply it fails OPEN (the selector matches)
and says so once per expression: a selector it cannot compile, one calling a Kubernetes library
function taught to neither the `cel` package nor this module (ip, cidr, format...), and one whose
estimated or measured cost is too high. The `cel` package holds the GIL while it evaluates and
cannot be interrupted, so the cost bound is mostly enforced before the first evaluation: length,
nesting and an estimate of comprehension iterations. Evaluation itself runs without any lock,
so one slow selector never makes another pod's selectors wait.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import cel
from kubernetes.utils import parse_quantity

from extender.devices.lru import GenerationalCache

log = logging.getLogger(__name__)
# `device.attributes["domain"].name` or `...["domain"]["name"]`, spaced as CEL allows. Whatever else
# reads `device` (a map walked, `device .attributes` spelled some way this misses) is left over and
# makes the expression depend on the whole device.
_REFERENCE = re.compile(
    r"""\bdevice\s*\.\s*(attributes|capacity)\s*\[\s*(['"])([^'"]+)\2\s*\]\s*"""
    r"""(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)\b(?!\s*\()|\[\s*(['"])([^'"]+)\5\s*\])"""
)
_PLAIN_FIELD = re.compile(r"\bdevice\s*\.\s*(?:driver|allowMultipleAllocations)\b(?!\s*[.\[(])")
_DEVICE = re.compile(r"\bdevice\b")
_UNDEFINED = re.compile(r"Undefined variable or function: '([^']+)'")
_MACRO = re.compile(r"\.\s*(?:all|exists|exists_one|existsOne|map|filter)\s*\(")
# A `[` after one of these (or at the start) opens a list literal; after anything else it indexes.
_LIST_OPENERS = frozenset("([{,:?!&|=<>+-*/%")

MAX_EXPRESSION_LENGTH = 10 * 1024  # the API server's limit for one selector expression
MAX_NESTING = 32  # brackets, parentheses and braces
MAX_ESTIMATED_ITERATIONS = 10_000  # product of comprehension ranges along the deepest nesting
UNKNOWN_RANGE = 64  # a comprehension over something other than a list literal (split(), a map)
EVALUATION_BUDGET_SECONDS = 0.05  # one evaluation slower than this makes the expression fail open
PROGRAM_CACHE_SIZE = 4096
RESULT_CACHE_SIZE = 65_536


def references(expression: str) -> tuple[tuple[str, str, str], ...] | None:
    """The (section, domain, name) entries of the device an expression reads, or None when it may
    read more than those, `driver` and `allowMultipleAllocations`: then its result depends on the
    whole device and is cached per device, never per the entries alone."""
    found = [(match[1], match[3], match[4] or match[6]) for match in _REFERENCE.finditer(expression)]
    leftover = _PLAIN_FIELD.sub("", _REFERENCE.sub("", expression))
    return None if _DEVICE.search(leftover) else tuple(found)


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


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except ValueError:
        return False
    return True


def _is_semver(text: str) -> bool:
    try:
        _comparable(_semver(text))
    except ValueError:
        return False
    return True


def _index_of(haystack: Any, needle: Any, start: int = 0) -> int:
    """strings.indexOf(substring[, offset]) and lists.indexOf(element)."""
    if isinstance(haystack, str):
        return haystack.find(needle, start)
    return next((i for i, item in enumerate(haystack) if item == needle), -1)


def _last_index_of(haystack: Any, needle: Any, *end: int) -> int:
    if isinstance(haystack, str):
        return haystack.rfind(needle, 0, end[0] + len(needle)) if end else haystack.rfind(needle)
    return next((i for i in range(len(haystack) - 1, -1, -1) if haystack[i] == needle), -1)


def _quantity_sum(left: Any, right: Any) -> dict[str, str]:
    return {"__quantity": str(_comparable(left) + _comparable(right))}


def _version_part(index: int) -> Callable[[Any], int]:
    return lambda version: int(_comparable(version)[index])


# The Kubernetes CEL libraries a device selector may use (k8s.io/apiserver/pkg/cel/library and
# cel-go's strings extension), in the forms the `cel` package does not know.
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": _semver,
    "isSemver": _is_semver,
    "compareTo": _compare_to,
    "isGreaterThan": lambda a, b: _compare_to(a, b) > 0,
    "isLessThan": lambda a, b: _compare_to(a, b) < 0,
    "asInteger": lambda q: int(_comparable(q)),
    "asApproximateFloat": lambda q: float(_comparable(q)),
    "isInteger": lambda q: _comparable(q) == int(_comparable(q)),
    "sign": lambda q: _compare_to(q, {"__quantity": "0"}),
    "add": _quantity_sum,
    "sub": lambda a, b: _quantity_sum(a, {"__quantity": str(-Decimal(_comparable(b)))}),
    "major": _version_part(0),
    "minor": _version_part(1),
    "patch": _version_part(2),
    "lowerAscii": lambda s: "".join(c.lower() if c.isascii() else c for c in s),
    "upperAscii": lambda s: "".join(c.upper() if c.isascii() else c for c in s),
    "trim": str.strip,
    "replace": lambda s, old, new, *limit: s.replace(old, new, limit[0] if limit else -1),
    "split": lambda s, separator, *limit: s.split(separator, limit[0] - 1 if limit and limit[0] > 0 else -1),
    "join": lambda items, *separator: (separator[0] if separator else "").join(items),
    "substring": lambda s, start, *end: s[start : end[0]] if end else s[start:],
    "charAt": lambda s, index: s[index] if index < len(s) else "",
    "reverse": lambda s: s[::-1],
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "isSorted": lambda items: all(_compare_to(a, b) <= 0 for a, b in itertools.pairwise(items)),
    "sum": sum,
    "min": lambda items: min(items, key=_comparable),
    "max": lambda items: max(items, key=_comparable),
    "find": lambda s, pattern: found.group(0) if (found := re.search(pattern, s)) else "",
    "findAll": lambda s, pattern, *limit: [m.group(0) for m in re.finditer(pattern, s)][: limit[0] if limit else None],
}


def _context() -> cel.Context:
    context = cel.Context()
    for name, function in _FUNCTIONS.items():
        context.add_function(name, function)
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


def _skip_string(expression: str, start: int) -> int:
    """Index just after the string literal that opens at `start`."""
    quote = expression[start]
    index = start + 1
    while index < len(expression) and expression[index] != quote:
        index += 2 if expression[index] == "\\" else 1
    return index + 1


def estimate(expression: str) -> tuple[int, int]:
    """(deepest nesting, estimated iterations) without a parser: each comprehension macro
    iterates over a list literal's element count when its receiver is one, else UNKNOWN_RANGE
    (device attributes are scalars, so other ranges come from split() or a map's keys), and
    nested comprehensions multiply."""
    stack: list[tuple[str, int]] = []  # (opening bracket, iterations it multiplies by; list: commas)
    list_sizes: dict[int, int] = {}  # index of a list literal's `]` -> element count
    macros = {match.end() - 1 for match in _MACRO.finditer(expression)}
    deepest = iterations = 0
    previous = ""
    index = 0
    while index < len(expression):
        char = expression[index]
        if char in "'\"":
            index = _skip_string(expression, index)
            previous = char
            continue
        if char == "[":
            stack.append(("[", 0) if not previous or previous in _LIST_OPENERS else ("index", 0))
        elif char in "({":
            multiplier = 1
            if index in macros:
                receiver_end = len(expression[: expression.rfind(".", 0, index)].rstrip()) - 1
                multiplier = list_sizes.get(receiver_end, UNKNOWN_RANGE)
            stack.append((char, multiplier))
            iterations = max(iterations, math.prod(m for kind, m in stack if kind == "("))
        elif char == "," and stack and stack[-1][0] == "[":
            stack[-1] = ("[", stack[-1][1] + 1)
        elif char in ")]}" and stack:
            kind, commas = stack.pop()
            if kind == "[":
                list_sizes[index] = commas + 1 if previous not in ("[", "") else 0
        deepest = max(deepest, len(stack))
        if not char.isspace():
            previous = char
        index += 1
    return deepest, iterations


@dataclass(frozen=True)
class _Compiled:
    """A compiled selector; `program` None means it matches every device (fail open)."""

    program: Any
    references: tuple[tuple[str, str, str], ...] | None


class Selectors:
    """Thread-safe, size-bounded compiled-expression and result caches."""

    def __init__(
        self, program_cache_size: int = PROGRAM_CACHE_SIZE, result_cache_size: int = RESULT_CACHE_SIZE
    ) -> None:
        # Both asked once per device of every node a new selector is matched on: no lock per read.
        self._compiled: GenerationalCache[str, _Compiled] = GenerationalCache(program_cache_size)
        self._results: GenerationalCache[tuple[str, str], bool] = GenerationalCache(result_cache_size)
        self._contexts = threading.local()  # a cel.Context is mutated per evaluation: one per thread

    def _fail_open(self, expression: str, why: str) -> _Compiled:
        log.warning("CEL selector %r treated as matching every device: %s", expression[:200], why)
        compiled = _Compiled(None, None)
        self._compiled.put(expression, compiled)
        return compiled

    def _compile(self, expression: str) -> _Compiled:
        compiled = self._compiled.get(expression)
        if compiled is not None:
            return compiled
        if len(expression) > MAX_EXPRESSION_LENGTH:
            return self._fail_open(expression, f"longer than {MAX_EXPRESSION_LENGTH} characters")
        nesting, iterations = estimate(expression)
        if nesting > MAX_NESTING:
            return self._fail_open(expression, f"nested {nesting} deep (limit {MAX_NESTING})")
        if iterations > MAX_ESTIMATED_ITERATIONS:
            return self._fail_open(expression, f"about {iterations} iterations (limit {MAX_ESTIMATED_ITERATIONS})")
        try:
            program = cel.compile(expression)
        except (ValueError, RuntimeError) as error:
            return self._fail_open(expression, f"not understood ({error})")
        compiled = _Compiled(program, references(expression))
        self._compiled.put(expression, compiled)
        return compiled

    @staticmethod
    def _signature(compiled: _Compiled, view: dict[str, Any]) -> str:
        if compiled.references is None:
            return json.dumps(view, sort_keys=True, default=str)
        picked = [view["driver"], view["allowMultipleAllocations"]]
        for section, domain, name in compiled.references:
            picked.append(view[section].get(domain, {}).get(name))
        # Leaf values only (strings, numbers, booleans, one-key quantity and semver dicts): their
        # repr is as exact as JSON and a third of its cost, paid for every device a new selector meets.
        return repr(picked)

    def _evaluate(self, expression: str, program: Any, view: dict[str, Any]) -> bool:
        context = getattr(self._contexts, "context", None)
        if context is None:
            context = self._contexts.context = _context()
        context.add_variable("device", view)
        started = time.perf_counter()
        try:
            result = program.execute(context) is True
        except RuntimeError as error:
            undefined = _UNDEFINED.search(str(error))
            if undefined and undefined.group(1) != "device":
                self._fail_open(expression, f"function {undefined.group(1)!r} is not available here")
                return True
            return False
        except (KeyError, ValueError, TypeError):
            return False
        elapsed = time.perf_counter() - started
        if elapsed > EVALUATION_BUDGET_SECONDS:
            self._fail_open(expression, f"one evaluation took {elapsed:.3f}s (budget {EVALUATION_BUDGET_SECONDS}s)")
            return True
        return result

    def matches(self, expression: str, view: dict[str, Any]) -> bool:
        compiled = self._compile(expression)
        if compiled.program is None:
            return True
        key = (expression, self._signature(compiled, view))
        cached = self._results.get(key)
        if cached is not None:
            return cached
        result = self._evaluate(expression, compiled.program, view)
        self._results.put(key, result)
        return result

    def reads_none_of(self, expressions: tuple[str, ...], attributes: frozenset[tuple[str, str]]) -> bool:
        """Whether no expression reads any of these (domain, name) attributes, so devices that differ
        only in them match alike. An expression that walks the device's maps could read anything."""
        for expression in expressions:
            compiled = self._compile(expression)
            if compiled.program is None:
                continue  # matches every device whatever it reads
            if compiled.references is None:
                return False
            if any(
                section == "attributes" and (domain, name) in attributes
                for section, domain, name in compiled.references
            ):
                return False
        return True

    def all_match(self, expressions: list[str], view: dict[str, Any]) -> bool:
        return all(self.matches(expression, view) for expression in expressions)

    def sizes(self) -> tuple[int, int]:
        """(compiled expressions, cached results): what the memory bound is checked against."""
        return len(self._compiled), len(self._results)
