"""`nativedra cluster up|down|status`: a local control plane that outlives the command."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import config

from nativedra.base.cmdline.flags import add_flag
from nativedra.base.kube.names import GPU_NODE_LABEL
from nativedra.cluster import binaries
from nativedra.cluster.addons import ADDONS, Addon, build_addon, start_addon
from nativedra.cluster.controlplane import ControlPlane, ControlPlaneError, recorded_state, stop_recorded
from nativedra.cluster.helm import build_helm
from nativedra.cluster.image import build_image
from nativedra.cluster.realnode import RealNode, prepare_real_node, teardown_recorded


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "nativedra" / "cluster"


def load_scheduler_extra(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ControlPlaneError(f"--scheduler-config-extra {path}: {error}") from error
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ControlPlaneError(
            f"--scheduler-config-extra {path}: expected a YAML mapping of KubeSchedulerConfiguration "
            f"fields, got {type(data).__name__}"
        )
    return data


def start_detached(state_dir: Path, scheduler_extra: dict[str, Any], version: str | None = None) -> ControlPlane:
    plane = ControlPlane(
        state_dir=state_dir.resolve(),
        binaries=binaries.resolve(version),
        scheduler_config_extra=scheduler_extra,
        tie_to_parent=False,
    )
    plane.start()
    return plane


def _addons(text: str | None) -> list[Addon]:
    names = [name.strip() for name in (text or "").split(",") if name.strip()]
    unknown = sorted(set(names) - set(ADDONS))
    if unknown:
        raise ControlPlaneError(
            f"--with {text}: unknown controller(s) {', '.join(unknown)}; known: {', '.join(ADDONS)}"
        )
    return [ADDONS[name] for name in names]


def _up(args: argparse.Namespace) -> int:
    try:
        addons = _addons(args.with_controllers)
        extra = load_scheduler_extra(args.scheduler_config_extra)
        plane = start_detached(Path(args.state_dir), extra, binaries.checked_version(args.k8s_version))
        if addons:
            api = config.new_client_from_config(config_file=str(plane.kubeconfig))
            for addon in addons:
                start_addon(plane, api, addon)
        if args.real_node:
            node = RealNode(plane, args.real_node, labels={GPU_NODE_LABEL: "true"}, repo=args.image_source)
            node.start()
            if node.image:
                print(f"nativedra cluster up: node {args.real_node} has image {node.image}", file=sys.stderr)
    except (ControlPlaneError, binaries.BinaryError) as error:
        print(f"nativedra cluster up: {error}", file=sys.stderr)
        return 1
    print(plane.kubeconfig)
    return 0


def _build(args: argparse.Namespace) -> int:
    started = time.monotonic()
    try:
        version = binaries.checked_version(args.k8s_version)
        found = binaries.resolve(version)
        controllers = [build_addon(addon) for addon in _addons(args.with_controllers)]
        node_parts = prepare_real_node(version, args.image_source) if args.real_node else []
        tools = [build_helm()] if args.helm else []
    except (ControlPlaneError, binaries.BinaryError) as error:
        print(f"nativedra cluster build: {error}", file=sys.stderr)
        return 1
    built = (found.etcd, found.kube_apiserver, found.kube_scheduler, found.kube_controller_manager)
    for path in (*built, *controllers, *node_parts, *tools):
        print(path)
    print(f"Kubernetes {found.version} binaries ready in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return 0


def _image(args: argparse.Namespace) -> int:
    try:
        name, archive = build_image(args.source.resolve())
    except binaries.BinaryError as error:
        print(f"nativedra cluster image: {error}", file=sys.stderr)
        return 1
    print(name)
    print(f"saved as {archive} (import: ctr -n k8s.io images import {archive})", file=sys.stderr)
    return 0


def _down(args: argparse.Namespace) -> int:
    state = recorded_state(Path(args.state_dir)) or {}
    teardown_recorded(state, lambda name: stop_recorded(Path(args.state_dir), only=name))
    stopped = stop_recorded(Path(args.state_dir))
    print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"), file=sys.stderr)
    return 0


def _status(args: argparse.Namespace) -> int:
    state = recorded_state(Path(args.state_dir))
    if state is None:
        print("no cluster recorded in " + str(args.state_dir), file=sys.stderr)
        return 1
    print(json.dumps(state, indent=2))
    return 0 if all(p["running"] for p in state["processes"]) else 1


def register(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cluster = subcommands.add_parser(
        "cluster",
        help="run a local Kubernetes control plane (etcd, apiserver, scheduler, controller-manager)",
        description="A real control plane on 127.0.0.1 built from upstream k8s.io/kubernetes "
        f"(default {binaries.DEFAULT_K8S_VERSION}, override with NATIVEDRA_K8S_VERSION; "
        "binaries cached under ~/.cache/nativedra/k8s; KUBEBUILDER_ASSETS honoured). No kubelet runs.",
    )
    actions = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start it and print the admin kubeconfig path")
    add_flag(
        up,
        "--scheduler-config-extra",
        type=Path,
        help="YAML merged into the KubeSchedulerConfiguration (e.g. extenders:, percentageOfNodesToScore:)",
    )
    up.set_defaults(handler=_up)
    build = actions.add_parser("build", help="build (or find) the binaries without starting anything")
    build.set_defaults(handler=_build)
    add_flag(up, "--real-node", metavar="NAME", help="also a real node: kubelet on containerd 2.x and runc (root)")
    build.add_argument("--real-node", action="store_true", help="also a real node's kubelet, containerd and images")
    build.add_argument("--helm", action="store_true", help="also helm, built from its Go module (the chart's tests)")
    image = actions.add_parser("image", help="build the nativedra image of a source tree with podman; print its name")
    image.add_argument("source", type=Path, nargs="?", default=Path(), help="the source tree (default: .)")
    image.set_defaults(handler=_image)
    for parser in (up, build):
        add_flag(
            parser,
            "--image-source",
            type=Path,
            help="with --real-node: a nativedra source tree whose image the node gets (built with podman)",
        )
        add_flag(
            parser,
            "--k8s-version",
            default=binaries.DEFAULT_K8S_VERSION,
            help=f"Kubernetes release to build and run (1.{binaries.MINIMUM_MINOR}+), with its default feature gates",
        )
        add_flag(
            parser,
            "--with",
            dest="with_controllers",
            help="also the workload controllers, built from their Go modules and run with their CRDs and webhooks: "
            + ", ".join(f"{a.name} ({a.module} {a.version})" for a in ADDONS.values()),
        )
    down = actions.add_parser("down", help="stop the processes recorded by `up`")
    down.set_defaults(handler=_down)
    status = actions.add_parser("status", help="show the recorded processes; exit 1 unless all run")
    status.set_defaults(handler=_status)
    for parser in (up, down, status):
        add_flag(parser, "--state-dir", type=Path, default=default_state_dir(), help="cluster files and logs")
