"""Generate the Python gRPC code for the in-tree .proto files into dra_driver/proto/gen.

`python -m dra_driver.proto.generate` regenerates; `--check` fails when the committed code is stale.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

PROTO_ROOT = Path(__file__).resolve().parent
REPO = PROTO_ROOT.parent.parent
GEN = PROTO_ROOT / "gen"


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if dra_driver/proto/gen is not current")
    args = parser.parse_args(argv)
    if args.check:
        with tempfile.TemporaryDirectory() as fresh:
            generate(Path(fresh))
            if not _same_tree(Path(fresh), GEN):
                print("dra_driver/proto/gen is stale: run python -m dra_driver.proto.generate", file=sys.stderr)
                return 1
        return 0
    if GEN.exists():
        shutil.rmtree(GEN)
    generate(GEN)
    return 0


if __name__ == "__main__":
    sys.exit(main())
