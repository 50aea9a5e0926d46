"""`nativedra demo` on the command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nativedra.base.cmdline.flags import add_flag
from nativedra.cluster import WaitTimeoutError, binaries
from nativedra.cluster.cli import default_state_dir
from nativedra.cluster.controlplane import ControlPlaneError
from nativedra.demo.run import run_demo


def _demo(args: argparse.Namespace) -> int:
    try:
        return run_demo(Path(args.state_dir).resolve())
    except (ControlPlaneError, binaries.BinaryError, WaitTimeoutError) as error:
        print(f"nativedra demo: {error}", file=sys.stderr)
        return 1


def register(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subcommands.add_parser(
        "demo",
        help="local cluster + simulated GPU nodes + examples, then a map of the placements",
        description="Starts the local control plane, five simulated GPU nodes (2 racks x 2 nodes of 8x H100, "
        "one node of 4x L4 in consumable-share mode) each with a real plugin process, the real extender and the "
        "real JobSet and LeaderWorkerSet controllers, applies the examples and prints which pod holds which GPU. "
        "Leaves it running; stop with `nativedra cluster down`.",
    )
    add_flag(demo, "--state-dir", type=Path, default=default_state_dir(), help="cluster files and logs")
    demo.set_defaults(handler=_demo)
