"""`python -m bench [NAME ...]`: run benchmarks against a fresh local control plane."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from kubernetes import client, config

from bench import (
    bench_extender,
    bench_native_gang,
    bench_preemption,
    bench_preemption_oracle,
    bench_prepare,
    bench_recovery,
    bench_scheduler,
    bench_slices,
    bench_spares,
)
from nativedra.cluster import ControlPlane, resolve

BENCHMARKS: dict[str, Callable[[client.ApiClient, ControlPlane], Iterator[str]]] = {
    "slices": lambda api, _plane: bench_slices.run(api),
    "prepare": lambda api, plane: bench_prepare.run(api, plane.kubeconfig),
    "extender": bench_extender.run,
    "extender_mixed": bench_extender.run_mixed,
    "scheduler": bench_scheduler.run,
    "scheduler_5000": bench_scheduler.run_large,
    "native_gang": bench_native_gang.run,
    "preemption": bench_preemption.run,
    "preemption_oracle": bench_preemption_oracle.run,
    "recovery": bench_recovery.run,
    "recovery_spares": bench_spares.run,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", choices=[*BENCHMARKS, []], help="benchmarks to run (default: all)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nativedra-bench-") as state:
        plane = ControlPlane(
            state_dir=Path(state) / "cluster",
            binaries=resolve(),
            controller_manager_flags=bench_scheduler.CONTROLLER_MANAGER_CLIENT,
        )
        plane.start()
        try:
            api = config.new_client_from_config(config_file=str(plane.kubeconfig))
            for name in args.names or BENCHMARKS:
                print(f"== {name}", flush=True)
                for line in BENCHMARKS[name](api, plane):
                    print(line, flush=True)
        finally:
            plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
