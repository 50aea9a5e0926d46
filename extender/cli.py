"""`nativedra extender`: the scheduler extender as an HTTP service."""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from pathlib import Path

import uvicorn

from cmdline.flags import add_flag
from extender.app import create_app
from extender.config import ConfigError, load_config
from extender.decide import Decider
from extender.state import ClusterState, run_informer
from kube.client import api_client

log = logging.getLogger(__name__)


def _run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as error:
        print(f"nativedra extender: {error}", file=sys.stderr)
        return 2
    api = api_client(args.kubeconfig)
    state = ClusterState(config.driver)
    stop = threading.Event()
    for kind in ClusterState.KINDS:
        threading.Thread(target=run_informer, args=(api, state, kind, stop), name=f"watch-{kind}", daemon=True).start()
    app = create_app(state, Decider(config))
    log.info(
        "extender listening on %s:%d (topology levels: %s)", args.address, args.port, ", ".join(config.topology_levels)
    )
    uvicorn.run(app, host=args.address, port=args.port, log_level="warning", access_log=False)
    stop.set()
    return 0


def register(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    extender = subcommands.add_parser(
        "extender",
        help="run the scheduler extender (gang placement, topology domains, scoring)",
        description="HTTP extender for kube-scheduler: /filter, /prioritize, /healthz, /readyz, /metrics. "
        "Configure the scheduler with nodeCacheCapable: true, no managedResources, percentageOfNodesToScore: 100.",
    )
    add_flag(extender, "--kubeconfig", type=Path, help="kubeconfig file; default: in-cluster service account")
    add_flag(extender, "--port", type=int, default=8888, help="HTTP port")
    add_flag(extender, "--address", default="0.0.0.0", help="listen address")  # noqa: S104 - a Service fronts it
    add_flag(extender, "--config", type=Path, help="YAML: topologyLevels, planTimeoutSeconds, weights")
    extender.set_defaults(handler=_run)
