"""The `nativedra` command: one entry point, a subcommand per capability."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from dra_driver.kubelet import probe as plugin_probe
from dra_driver.run import cli as plugin_cli
from extender import cli as extender_cli
from nativedra import __version__
from nativedra.base.certs import renewal_cli as cert_renewal_cli
from nativedra.cluster import cli as cluster_cli
from nativedra.demo import cli as demo_cli
from nativedra.map import cli as map_cli

Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


def _registrars() -> list[Registrar]:
    return [
        plugin_cli.register,
        plugin_probe.register,
        extender_cli.register,
        cert_renewal_cli.register,
        cluster_cli.register,
        demo_cli.register,
        map_cli.register,
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nativedra",
        description="GPU workloads on Kubernetes as native Pods: DRA node plugin, scheduler extender, "
        "and a local control plane for trying them.",
    )
    parser.add_argument("--version", action="version", version=f"nativedra {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in _registrars():
        register(subcommands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
