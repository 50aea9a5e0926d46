"""The second-scheduler overlay's kube-scheduler on a local control plane, beside the plane's own:
the profile and extender section as `manifests/overlays/second-scheduler` ships them (pointed at a
local extender over its TLS files), and the overlay's marker policy in effect while it runs."""

from __future__ import annotations

import contextlib
import dataclasses
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from nativedra.cluster import ControlPlane, components, wait_for
from nativedra.cluster.controlplane import free_port
from nativedra.cluster.extender_wiring import marked_now, withdraw_marker_policy
from nativedra.cluster.pki import ExtenderTls
from nativedra.objects import apply_documents

OVERLAY = Path(__file__).resolve().parents[1] / "manifests" / "overlays" / "second-scheduler"
NAME = "nativedra-scheduler"


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def shipped_config() -> dict[str, Any]:
    """The KubeSchedulerConfiguration in the overlay's ConfigMap."""
    config_map = next(d for d in _documents(OVERLAY / "second-scheduler.yaml") if d["kind"] == "ConfigMap")
    return dict(yaml.safe_load(config_map["data"]["config.yaml"]))


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


@contextlib.contextmanager
def second_scheduler(plane: ControlPlane, root: Path, port: int, tls: ExtenderTls) -> Iterator[None]:
    """Run the overlay's scheduler calling the extender on 127.0.0.1:`port` until the block ends."""
    shipped = shipped_config()
    extender = dict(shipped["extenders"][0])
    extender["urlPrefix"] = f"https://127.0.0.1:{port}"
    extender["tlsConfig"] = {
        "caFile": str(tls.ca_cert),
        "certFile": str(tls.client_cert),
        "keyFile": str(tls.client_key),
        "serverName": "localhost",
    }
    extra = {"profiles": shipped["profiles"], "extenders": [extender]}
    extra["percentageOfNodesToScore"] = shipped["percentageOfNodesToScore"]
    config_path = root / "second-scheduler.yaml"
    config_path.write_text(yaml.safe_dump(components.scheduler_config(plane.layout, extra), sort_keys=False))
    secure_port = free_port()
    layout = dataclasses.replace(plane.layout, ports={**plane.layout.ports, "scheduler": secure_port})
    plane.spawn(NAME, plane.binaries.kube_scheduler, components.scheduler_args(layout, config_path))
    api = plane.api_client()
    policy = _documents(OVERLAY / "extender-marker-policy.yaml")
    try:
        wait_for(lambda: _listening(secure_port), 60, f"{NAME} listening on {secure_port}")
        apply_documents(api, policy)
        wait_for(lambda: marked_now(api, NAME), 30, f"the overlay's policy marking {NAME}'s pods")
        yield
    finally:
        withdraw_marker_policy(api, policy[0]["metadata"]["name"])
        plane.supervisor.stop(NAME)
