"""Generate the Python gRPC code for the in-tree .proto files into dra_driver/proto/gen.

`python -m dra_driver.proto.generate` regenerates; `--check` fails when the committed code is stale,
that is when it differs from what the locked grpcio-tools (requirements/dev.txt) writes, and says
which versions it compared.
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.metadata
import re
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

PROTO_ROOT = Path(__file__).resolve().parent
REPO = PROTO_ROOT.parent.parent
GEN = PROTO_ROOT / "gen"
LOCK = REPO / "requirements" / "dev.txt"
TOOLS = "grpcio-tools"
# Each generated gRPC module names the grpcio it was made for (the same as the grpcio-tools version).
_GENERATED_VERSION = re.compile(r"^GRPC_GENERATED_VERSION = '([^']+)'", re.MULTILINE)


def protos() -> list[Path]:
    return sorted(PROTO_ROOT.rglob("*.proto"))


def generate(out: Path) -> None:
    """Compile every proto; modules land at gen/<same relative path>."""
    staging = Path(tempfile.mkdtemp())
    try:
        for proto in protos():
            relative = proto.relative_to(PROTO_ROOT)
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(proto, target)
        args = [
            "grpc_tools.protoc",
            f"-I{staging}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
        ]
        out.mkdir(parents=True, exist_ok=True)
        for proto in protos():
            relative = proto.relative_to(PROTO_ROOT)
            if protoc.main([*args, str(relative)]) != 0:
                raise SystemExit(f"protoc failed for {relative}")
        for directory in [out, *(p for p in out.rglob("*") if p.is_dir())]:
            (directory / "__init__.py").touch()
        # Generated gRPC modules import their messages by proto path; make that a package path.
        for module in out.rglob("*_pb2_grpc.py"):
            package = ".".join(("dra_driver", "proto", "gen", *module.parent.relative_to(out).parts))
            text = module.read_text()
            dotted = ".".join(module.parent.relative_to(out).parts)
            module.write_text(text.replace(f"from {dotted} import api_pb2", f"from {package} import api_pb2"))
    finally:
        shutil.rmtree(staging)


def _same_tree(left: Path, right: Path) -> bool:
    comparison = filecmp.dircmp(left, right, ignore=["__pycache__"])
    if comparison.left_only or comparison.right_only or comparison.diff_files:
        return False
    return all(_same_tree(left / sub, right / sub) for sub in comparison.common_dirs)


def generated_version(tree: Path) -> str | None:
    """The grpcio version the gRPC modules under `tree` were generated for."""
    found = {m[1] for path in tree.rglob("*_pb2_grpc.py") if (m := _GENERATED_VERSION.search(path.read_text()))}
    return ", ".join(sorted(found)) or None


def locked_tools_version(lock: Path | None = None) -> str | None:
    lock = lock or LOCK
    found = re.search(rf"^{re.escape(TOOLS)}==([^\s;\\]+)", lock.read_text(), re.MULTILINE) if lock.is_file() else None
    return found[1] if found else None


def check() -> str | None:
    """Why the committed code is not what the locked grpcio-tools writes, or None when it is."""
    installed, locked = importlib.metadata.version(TOOLS), locked_tools_version()
    if installed != locked:
        return f"{TOOLS} {installed} is installed, but the lock ({LOCK}) says {locked}: run make venv"
    with tempfile.TemporaryDirectory() as fresh:
        generate(Path(fresh))
        if not _same_tree(Path(fresh), GEN):
            return (
                f"dra_driver/proto/gen is stale: {TOOLS} {installed} (the locked one) writes other code than "
                f"the committed one, which was made with {TOOLS} {generated_version(GEN)}: "
                "run python -m dra_driver.proto.generate"
            )
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if dra_driver/proto/gen is not current")
    args = parser.parse_args(argv)
    if args.check:
        problem = check()
        if problem:
            print(problem, file=sys.stderr)
        return 1 if problem else 0
    if GEN.exists():
        shutil.rmtree(GEN)
    generate(GEN)
    return 0


if __name__ == "__main__":
    sys.exit(main())
