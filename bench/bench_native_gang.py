"""Kubernetes 1.37's native gang scheduling and the extender side by side, in one run: the scenarios
and modes of `testkit.four_way` with more trials than its e2e module runs (`python -m bench native_gang`).
Default and extender run on the control plane `python -m bench` starts (default gates); native and
both on a second one with the gates. Figures go to bench-results/native_gang.json; the lines printed
end with the table for docs/gangs.md.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config

from bench.timing import write_results
from nativedra.cluster import ControlPlane, resolve
from testkit.four_way import NATIVE_GANGS, RACKS, Trials, run_modes, table

BENCH_TRIALS = Trials()


def _gated_plane(root: Path) -> ControlPlane:
    plane = ControlPlane(state_dir=root / "gated", binaries=resolve(), features=NATIVE_GANGS)
    plane.start()
    return plane


def run(api: client.ApiClient, plane: ControlPlane) -> Iterator[str]:
    started = time.perf_counter()
    document: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m bench native_gang",
        "cpus": os.cpu_count(),
        "kubernetes": plane.binaries.version,
        "gates": {"native": dict(NATIVE_GANGS.gates), "runtime_config": list(NATIVE_GANGS.runtime_config)},
        "racks": RACKS,
        "trials": asdict(BENCH_TRIALS),
        "modes": {},
    }
    with tempfile.TemporaryDirectory(prefix="nativedra-bench-native-") as scratch:
        root = Path(scratch)
        gated = _gated_plane(root)
        try:
            gated_api = config.new_client_from_config(config_file=str(gated.kubeconfig))
            clusters = {False: (plane, api), True: (gated, gated_api)}
            for item in run_modes(clusters, root, BENCH_TRIALS):
                if isinstance(item, str):
                    yield item
                else:
                    document["modes"][item[0]] = item[1]
        finally:
            gated.stop()
    document["seconds"] = time.perf_counter() - started
    lines = table(document["modes"])
    document["table"] = lines
    yield f"figures written to {write_results('native_gang', document)} ({document['seconds']:.0f} s)"
    yield from lines
