"""`nativedra map`: who holds which GPU on any cluster, from the API alone (a kubeconfig, no local
state): GPUs, fractions, MIG placements and shares with their pods, gangs with the extender's holds
and their age, devices kept for preemptors, pending GPU pods with the scheduler's reason, and
fragmentation per node and domain. Text for an 80-column terminal, and optionally an SVG."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from extender.cluster.informer import DEFAULT_NAMESPACE
from extender.plan.config import RACK_LABEL, ConfigError, load_config
from nativedra.base.cmdline.flags import add_flag
from nativedra.base.kube.client import api_client
from nativedra.map.clustermap import render_svg
from nativedra.map.read import read_cluster
from nativedra.map.report import NODE_LINES_UP_TO, render_report


def _run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as error:
        print(f"nativedra map: {error}", file=sys.stderr)
        return 2
    logging.getLogger("extender").setLevel(logging.WARNING)  # the planner's own log is for the extender's
    reading = read_cluster(api_client(args.kubeconfig), config, args.namespace)
    level = args.level
    if level is None:  # the configured topology level the nodes carry, else none
        labels = {key for node in reading.cluster.nodes for key in node.labels}
        level = next((key for key in (RACK_LABEL, *config.topology_levels) if key in labels), None)
    report = render_report(
        reading.cluster, reading.gangs, reading.reservations, level=level, width=args.width, all_nodes=args.all_nodes
    )
    print(report)
    if args.svg:
        args.svg.write_text(render_svg(reading.cluster, (level,) if level else ()))
        print(f"the same map as a picture: {args.svg}", file=sys.stderr)
    took = ", ".join(f"{step} {seconds:.2f} s" for step, seconds in reading.seconds.items())
    print(f"\nread in {took}", file=sys.stderr)
    return 0


def register(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subcommands.add_parser(
        "map",
        help="draw who holds which GPU on a cluster, from its API alone",
        description="Nodes, GPUs and their parts with the pods holding them, gangs with the extender's holds, "
        "devices kept for preemptors, pending GPU pods with the scheduler's reason, fragmentation per node "
        "and domain. Read-only: lists the objects the extender watches.",
    )
    add_flag(parser, "--kubeconfig", type=Path, help="kubeconfig file; default: in-cluster service account")
    add_flag(parser, "--config", type=Path, help="the extender's configuration (topology levels), as it runs")
    add_flag(parser, "--level", help="node label to group nodes by (default: the first configured level they carry)")
    add_flag(parser, "--namespace", default=DEFAULT_NAMESPACE, help="the extender's namespace (its preemption Leases)")
    add_flag(parser, "--width", type=int, default=80, help="columns of the text map")
    add_flag(parser, "--svg", type=Path, help="also write the map as an SVG picture here")
    add_flag(
        parser,
        "--all-nodes",
        action="store_true",
        help=f"a line per node on clusters of more than {NODE_LINES_UP_TO} GPU nodes (default: by domain)",
    )
    parser.set_defaults(handler=_run)
