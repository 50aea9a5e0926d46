"""NodePrepareResources through a real plugin process over its unix socket.

200 claims, each allocated one fraction of a 64-GPU simulated node (the allocation is written
directly, as an admin, so the benchmark measures prepare and not scheduling). Baselines from the
same run: one GET of a claim (the API read every prepare must make) for latency, and sequential
calls (one caller) for the 8-caller throughput. Each phase ends when the plugin's device status
reports (which yield to the kubelet's calls) are all in the API, and how long after the last answer
that was is a figure too: the next phase starts from a quiet node. A last phase has one caller
alternate the 200 claims with 200 more whose opaque config the plugin refuses, so each good
prepare runs while status reports and the refusals' Warning events are posted beside it. The
plugin writes its CDI specs on tmpfs (/dev/shm, where there is one), as it does on a node
(/var/run/cdi); its checkpoint and metadata files are on the disk. The figures also go to
bench-results/prepare.json.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from bench.timing import Timing, measure, report, write_results
from dra_driver.discovery.simulated import resolve_profile
from dra_driver.kubelet.opaque_config import API_VERSION
from dra_driver.kubelet_paths import dra_socket, registration_socket
from dra_driver.publishing.published import DeviceKind, DeviceView
from nativedra.base.kube.names import DRIVER_NAME, FRACTION_CLASS
from nativedra.base.kube.resources import RESOURCE_CLAIMS
from nativedra.cluster import commands, create_fake_node, wait_for
from nativedra.cluster.commands import NodeDirs
from nativedra.kubelet_client import make_dev_tree, plugin_info, prepare, unprepare
from nativedra.objects import create_claim, our_slices, request

NODE = "bench-prepare"
CLAIMS = 200
CALLERS = 8
GPUS = 64


def _profile(path: Path) -> Path:
    document = yaml.safe_load(resolve_profile("h100-8x").read_text())
    template = {**document["gpus"][0], "migEnabled": False}
    document["gpus"] = [
        {**template, "index": i, "minor": i, "uuid": f"GPU-bench-{i:04d}", "pciBusID": f"0000:{i + 1:02x}:00.0"}
        for i in range(GPUS)
    ]
    path.write_text(yaml.safe_dump(document))
    return path


def _fractions(api: client.ApiClient) -> list[str] | None:
    """The first CLAIMS fraction devices, once the node's pool is published whole: its slices
    appear one at a time, and prepares timed while the plugin still publishes (or a count taken
    early) would measure the start-up, not prepare."""
    pool = our_slices(api, NODE)
    newest = max((s["spec"]["pool"]["generation"] for s in pool), default=None)
    current = [s for s in pool if s["spec"]["pool"]["generation"] == newest]
    if not current or len(current) != current[0]["spec"]["pool"]["resourceSliceCount"]:
        return None
    devices = [device for s in current for device in s["spec"].get("devices") or []]
    fractions = sorted(d["name"] for d in devices if DeviceView.from_api(d).kind is DeviceKind.FRACTION)
    return fractions[: 2 * CLAIMS] if len(fractions) >= 2 * CLAIMS else None


REFUSED_PREFIX = "refused"
# A config the plugin refuses at prepare (no such sharing strategy): the claim fails with a Warning event.
REFUSED_CONFIG = {
    "source": "FromClaim",
    "requests": ["gpus"],
    "opaque": {
        "driver": DRIVER_NAME,
        "parameters": {"apiVersion": API_VERSION, "kind": "GpuConfig", "sharing": {"strategy": "Turbo"}},
    },
}


def _claims(
    api: client.ApiClient, namespace: str, devices: list[str], prefix: str = "claim", refused: bool = False
) -> list[tuple[str, str, str]]:
    keys = []
    for number, device in enumerate(devices):
        name = f"{prefix}-{number:03d}"
        created = create_claim(api, namespace, name, [request("gpus", FRACTION_CLASS)])
        results = [{"request": "gpus", "driver": DRIVER_NAME, "pool": NODE, "device": device}]
        created["status"] = {
            "allocation": {
                "devices": {"results": results, **({"config": [REFUSED_CONFIG]} if refused else {})},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
                    ]
                },
            }
        }
        RESOURCE_CLAIMS.replace_status(api, name, created, namespace)
        keys.append((namespace, created["metadata"]["uid"], name))
    return keys


def _reported(api: client.ApiClient, namespace: str, prepared: bool) -> bool:
    """Whether every claim of the namespace that can be prepared shows this node's device status
    (`prepared`), or none does; the refused ones never do."""
    items = RESOURCE_CLAIMS.list(api, field_selector=f"metadata.namespace={namespace}")["items"]
    claims = [c for c in items if not c["metadata"]["name"].startswith(REFUSED_PREFIX)]
    shown = [any(d.get("pool") == NODE for d in (c.get("status") or {}).get("devices") or []) for c in claims]
    return all(shown) if prepared else not any(shown)


def _settled(api: client.ApiClient, namespace: str, prepared: bool) -> float:
    """Seconds until the device status of every claim is as `prepared` says."""
    start = time.perf_counter()
    wait_for(lambda: _reported(api, namespace, prepared), 60, "the device status reports", interval_s=0.02)
    return time.perf_counter() - start


def _timed_prepare(socket: Path, key: tuple[str, str, str], refused: bool = False) -> float:
    start = time.perf_counter()
    response: Any = prepare(socket, "v1", [key])
    elapsed = time.perf_counter() - start
    if bool(response.claims[key[1]].error) != refused:
        raise RuntimeError(f"claim {key[2]}: {response.claims[key[1]].error or 'prepared, though its config is bad'}")
    return elapsed


def _warnings(api: client.ApiClient, namespace: str) -> int:
    """Warning events the plugin posted in the namespace."""
    items = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector="type=Warning").items
    return len(items)


def _alternating(
    socket: Path, keys: list[tuple[str, str, str]], refused: list[tuple[str, str, str]]
) -> tuple[Timing, Timing]:
    """One caller alternating a good claim and a refused one: the good ones' latencies, the refused ones'."""
    good, bad = [], []
    for key, bad_key in zip(keys, refused, strict=True):
        good.append(_timed_prepare(socket, key))
        bad.append(_timed_prepare(socket, bad_key, refused=True))
    return Timing(tuple(good)), Timing(tuple(bad))


def _prepare_all(socket: Path, keys: list[tuple[str, str, str]], callers: int) -> tuple[Timing, float]:
    """Every claim prepared once, one per call, by `callers` callers at once; per-call latencies
    and the wall time of the whole (the throughput)."""
    start = time.perf_counter()
    with ThreadPoolExecutor(callers) as pool:
        timing = Timing(tuple(pool.map(lambda key: _timed_prepare(socket, key), keys)))
    return timing, time.perf_counter() - start


def _on_tmpfs(root: Path) -> Path | None:
    """The CDI directory on tmpfs, where a node has it (/var/run): its writes are the runtime's to
    read, not to survive a reboot. None (the directory stays under `root`) where there is none."""
    shared_memory = Path("/dev/shm")  # noqa: S108 - a directory of our own is made in it (mkdtemp)
    if not shared_memory.is_dir():
        return None
    directory = Path(tempfile.mkdtemp(prefix="nd-bench-cdi-", dir=shared_memory))
    (root / "cdi").symlink_to(directory)
    return directory


def run(api: client.ApiClient, kubeconfig: Path) -> Iterator[str]:
    root = Path(tempfile.mkdtemp(prefix="nd-bench-", dir="/tmp"))
    cdi_on_tmpfs = _on_tmpfs(root)
    create_fake_node(api, NODE)
    client.CoreV1Api(api).create_namespace({"metadata": {"name": "bench-prepare"}})
    make_dev_tree(NodeDirs(root).dev, range(GPUS))
    dirs = NodeDirs(root)
    profile = str(_profile(root / "big.yaml"))
    process = subprocess.Popen(
        commands.plugin(NODE, kubeconfig, "--backend", "simulated", "--profile", profile, dirs=dirs),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        registration = registration_socket(dirs.registry)
        wait_for(lambda: plugin_info(registration), 60, "the plugin to serve")
        fractions = wait_for(lambda: _fractions(api), 60, f"{2 * CLAIMS} published fractions")
        keys = _claims(api, "bench-prepare", fractions[:CLAIMS])
        refused = _claims(api, "bench-prepare", fractions[CLAIMS:], REFUSED_PREFIX, refused=True)
        socket = dra_socket(dirs.plugins)
        get = measure(lambda: RESOURCE_CLAIMS.get(api, keys[0][2], "bench-prepare"), CLAIMS)
        sequential, sequential_wall = _prepare_all(socket, keys, 1)
        reported = _settled(api, "bench-prepare", prepared=True)
        yield report(f"NodePrepareResources, {CLAIMS} claims, 1 caller", sequential, get, "one claim GET")
        unprepare(socket, "v1", keys)
        _settled(api, "bench-prepare", prepared=False)
        concurrent, concurrent_wall = _prepare_all(socket, keys, CALLERS)
        reported_concurrent = _settled(api, "bench-prepare", prepared=True)
        sequential_rate, concurrent_rate = CLAIMS / sequential_wall, CLAIMS / concurrent_wall
        yield report(
            f"NodePrepareResources, {CALLERS} callers",
            concurrent,
            get,
            "one claim GET",
            f"throughput {concurrent_rate:.0f} claims/s = {concurrent_rate / sequential_rate:.2f} x 1 caller "
            f"({sequential_rate:.0f} claims/s)",
        )
        yield (
            f"device status of every claim in the API {reported:.2f} s after the last answer (1 caller), "
            f"{reported_concurrent:.2f} s ({CALLERS} callers)"
        )
        unprepare(socket, "v1", keys)
        _settled(api, "bench-prepare", prepared=False)
        warnings_before = _warnings(api, "bench-prepare")
        beside, refusals = _alternating(socket, keys, refused)
        reported_beside = _settled(api, "bench-prepare", prepared=True)
        wait_for(lambda: _warnings(api, "bench-prepare") - warnings_before >= CLAIMS, 60, "the Warning events")
        events = _warnings(api, "bench-prepare") - warnings_before
        yield report(
            f"NodePrepareResources, {CLAIMS} claims, 1 caller, each after a refused claim (its Warning event posted)",
            beside,
            get,
            "one claim GET",
            f"{events} Warning events; the refused prepares p50 {refusals.p50_ms:.2f} ms",
        )
        path = write_results(
            "prepare",
            {
                "claims": CLAIMS,
                "one_claim_get": get.figures(get),
                "one_caller": {**sequential.figures(get), "claims_per_s": sequential_rate, "status_after_s": reported},
                f"{CALLERS}_callers": {
                    **concurrent.figures(get),
                    "claims_per_s": concurrent_rate,
                    "throughput_ratio": concurrent_rate / sequential_rate,
                    "status_after_s": reported_concurrent,
                },
                "one_caller_beside_refusals": {
                    **beside.figures(get),
                    "refused": refusals.figures(get),
                    "warning_events": events,
                    "status_after_s": reported_beside,
                },
            },
        )
        yield f"figures written to {path}"
        unprepare(socket, "v1", keys)
    finally:
        process.terminate()
        process.wait(timeout=15)
        shutil.rmtree(root, ignore_errors=True)
        if cdi_on_tmpfs is not None:
            shutil.rmtree(cdi_on_tmpfs, ignore_errors=True)
        # Its slices go with the node (owned by it): later benchmarks start from no nodes of ours.
        client.CoreV1Api(api).delete_node(NODE)
        client.CoreV1Api(api).delete_namespace("bench-prepare")
