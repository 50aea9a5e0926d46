"""Figures of the code's shape, for reviews of its structure: modules per folder, import arrows,
the classes with the most attributes, the wheel's top-level import names, and the walk one pod
takes through /filter (which project modules its calls enter, in order).

`python -m tools.architecture [--nodes N]` prints them as Markdown tables. The walk serves the real
app under uvicorn (`bench.busy_cluster`) and records every call into project code in the server's
thread during one /filter of a 1-GPU pod and one of a gang member, after a warm-up call of each; a
*return* is an entry into a module the walk already left.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import sys
import threading
import tomllib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import grimp

ROOT = Path(__file__).resolve().parent.parent
# Before the shared helpers moved under nativedra/base, they were top-level packages of their own.
PRODUCT = ("nativedra", "dra_driver", "extender", "cdi", "kube", "cmdline", "fsutil", "gcutil")


def product_packages() -> list[str]:
    return [name for name in PRODUCT if (ROOT / name / "__init__.py").exists()]


def product_files() -> Iterator[Path]:
    for package in product_packages():
        for path in sorted((ROOT / package).rglob("*.py")):
            if "proto/gen" not in path.as_posix():
                yield path


def modules_per_folder() -> Counter[str]:
    """Modules (not counting `__init__`) per folder of product code."""
    return Counter(path.parent.relative_to(ROOT).as_posix() for path in product_files() if path.name != "__init__.py")


def arrows(package: str) -> int:
    """Import arrows between modules of `package`."""
    graph = grimp.build_graph(*product_packages())
    inside = [module for module in graph.modules if module == package or module.startswith(package + ".")]
    return sum(
        1
        for module in inside
        for imported in graph.find_modules_directly_imported_by(module)
        if imported.startswith(package + ".") or imported == package
    )


def class_attributes(path: Path) -> Iterator[tuple[str, int]]:
    """(class, attribute count) of each class in `path`: `self.x` assigned in its methods, and
    annotated fields of its body (dataclasses)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        names = {
            statement.target.id
            for statement in node.body
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
        }
        for inner in ast.walk(node):
            targets: list[ast.expr] = []
            if isinstance(inner, ast.Assign):
                targets = list(inner.targets)
            elif isinstance(inner, ast.AnnAssign | ast.AugAssign):
                targets = [inner.target]
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                ):
                    names.add(target.attr)
        relative = path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
        yield f"{relative}.{node.name}", len(names)


def largest_classes(package: str, top: int) -> list[tuple[str, int]]:
    found = [
        pair
        for path in product_files()
        if path.relative_to(ROOT).parts[0] == package
        for pair in class_attributes(path)
    ]
    return sorted(found, key=lambda pair: -pair[1])[:top]


def wheel_import_names() -> list[str]:
    """Top-level import names the wheel installs: the packages pyproject's find includes."""
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    prefixes = tuple(pattern.rstrip("*") for pattern in find["include"])
    return sorted(path.parent.name for path in ROOT.glob("*/__init__.py") if path.parent.name.startswith(prefixes))


def _first(*names: str) -> Any:
    """The first of `names` (module:attribute) that imports: the walk runs on trees before and
    after a move."""
    for name in names:
        module, _, attribute = name.partition(":")
        try:
            found = importlib.import_module(module)
        except ImportError:
            continue
        if str(found.__file__).startswith(str(ROOT)):  # not the other tree's, through an editable install
            return getattr(found, attribute)
    raise ImportError(f"none of {names}")


class Walk:
    """Records the product module of every Python call made in the server's thread while on."""

    def __init__(self) -> None:
        self.on = False
        self.entries: list[str] = []
        self.roots = tuple(str(ROOT / package) + "/" for package in product_packages())

    def profile(self, frame: FrameType, event: str, _arg: object) -> None:
        if not self.on or event != "call":
            return
        filename = frame.f_code.co_filename
        if filename.startswith(self.roots):
            module = Path(filename).relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
            if not self.entries or self.entries[-1] != module:
                self.entries.append(module)


def filter_walks(nodes: int) -> dict[str, list[str]]:
    busy = importlib.import_module("bench.busy_cluster")
    create_app = _first("extender.serve.app:create_app", "extender.app:create_app")
    decider_class = _first("extender.plan.decide:Decider", "extender.decide:Decider")
    config_class = _first("extender.plan.config:ExtenderConfig", "extender.config:ExtenderConfig")
    state, workload, list_last = busy.listed(nodes)
    list_last()
    walk = Walk()
    threading.setprofile(walk.profile)
    walks: dict[str, list[str]] = {}
    try:
        with busy.serving(create_app(state, decider_class(config_class()))) as port:
            client = busy.Client(port)
            while not client.ready():
                pass
            for shape in ("single", "member"):
                client.call("filter", workload.bodies[shape])  # warm: the first plan is not the walk
                walk.entries = []
                walk.on = True
                client.call("filter", workload.bodies[shape])
                walk.on = False
                walks[shape] = [entry for entry in walk.entries if not entry.endswith("__init__")]
    finally:
        threading.setprofile(None)
    return walks


def _returns(entries: list[str]) -> int:
    return len(entries) - len(set(entries))


def room_of(module: str) -> str:
    """The room a module is in: its subpackage of the extender or of the shared layer, else its
    own top-level package (the flat extender of before is one room per module)."""
    parts = module.split(".")
    if parts[:2] == ["nativedra", "base"]:
        return "base"
    if parts[0] in ("kube", "cmdline", "fsutil", "gcutil"):
        return "base"
    return parts[1] if parts[0] == "extender" and len(parts) > 2 else module


def rooms(entries: list[str]) -> list[str]:
    walked: list[str] = []
    for entry in entries:
        room = room_of(entry)
        if not walked or walked[-1] != room:
            walked.append(room)
    return walked


def report(nodes: int) -> str:
    lines = ["| folder | modules |", "|---|---|"]
    lines += [f"| `{folder}/` | {count} |" for folder, count in sorted(modules_per_folder().items())]
    lines += ["", "| package | import arrows inside |", "|---|---|"]
    lines += [f"| `{package}` | {arrows(package)} |" for package in ("extender", "dra_driver")]
    lines += ["", "| class | attributes |", "|---|---|"]
    lines += [f"| `{name}` | {count} |" for name, count in largest_classes("extender", 6)]
    lines += ["", f"wheel top-level import names: {', '.join(wheel_import_names())}", ""]
    lines += [
        "| /filter walk | entries | modules | returns to a module left | rooms entered | rooms | returns to a room |",
        "|---|---|---|---|---|---|---|",
    ]
    walks = filter_walks(nodes)
    for shape, entries in walks.items():
        walked = rooms(entries)
        lines.append(
            f"| {shape} | {len(entries)} | {len(set(entries))} | {_returns(entries)} "
            f"| {len(walked)} | {len(set(walked))} | {_returns(walked)} |"
        )
    for shape, entries in walks.items():
        lines += ["", f"{shape}: " + " -> ".join(entry.removeprefix("extender.") for entry in entries)]
        lines += ["", f"{shape} by room: " + " -> ".join(rooms(entries))]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200, help="size of the busy cluster the walk runs on")
    args = parser.parse_args(argv)
    sys.setrecursionlimit(10_000)
    print(report(args.nodes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
