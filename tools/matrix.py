"""The plugin and extender e2e against several Kubernetes releases, each with its default feature
gates, as the clusters users run (1.34/1.35 on most managed offerings): which rows of docs/install.md's
version table work on which release.

`python -m tools.matrix [--versions v1.34.4,v1.35.4]` (`make test-matrix`; not in CI: it builds every
release's control plane once, 5-10 minutes each on 2 cores, then runs the modules per release)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

VERSIONS = ("v1.34.4", "v1.35.4", "v1.36.2", "v1.37.2", "v1.38.0-beta.0")
# What runs against an API server and scheduler: not the real node (a kubelet build per release),
# not JobSet/LWS (their controllers pin their own client versions), not native gangs (1.37 only).
MODULES = (
    "e2e/test_smoke.py",
    "e2e/test_plugin_slices.py",
    "e2e/test_kubelet_plugin.py",
    "e2e/test_abuse_plugin.py",
    "e2e/test_features_not_served.py",
    "e2e/test_taints_not_served.py",
    "e2e/test_extender.py",
    "e2e/test_abuse_extender_planning.py",
    "e2e/test_admission_policies.py",
)
# docs/install.md rows -> the tests that show them (a test name prefix, parameters included).
ROWS: dict[str, tuple[str, ...]] = {
    "whole GPUs": (
        "test_smoke.py::",
        "test_kubelet_plugin.py::test_prepare_and_unprepare_a_claim_the_real_scheduler_allocated",
        "test_features_not_served.py::",
    ),
    "NUMA": ("test_extender.py::test_scores_prefer_one_numa_node_and_partly_used_nodes",),
    "MIG": ("test_plugin_slices.py::test_real_scheduler_allocates_by_product_name_numa_mig_and_fraction",),
    "fractions": (
        "test_plugin_slices.py::test_fractions_and_whole_gpu_exclude_each_other",
        "test_kubelet_plugin.py::test_fraction_gets_mps_limits_and_share_gets_its_share_id",
    ),
    "shares": ("test_plugin_slices.py::test_consumable_share_allocates_a_10gi_share",),
    "taints, health": ("test_kubelet_plugin.py::test_a_faulty_gpu_is_tainted_reported_unhealthy_and_recovers",),
    "gangs": (
        "test_extender.py::test_two_gangs",
        "test_extender.py::test_required_rack",
        "test_abuse_extender_planning",
    ),
}


@dataclass
class Outcome:
    """One release's run: every test's result, and how long the run took."""

    version: str
    seconds: float = 0.0
    results: dict[str, str] = field(default_factory=dict)  # "module.py::test[param]" -> passed|failed|skipped
    error: str = ""

    def count(self, result: str) -> int:
        return sum(1 for value in self.results.values() if value == result)

    def row(self, prefixes: tuple[str, ...]) -> str:
        picked = [value for name, value in self.results.items() if name.startswith(prefixes)]
        if not picked:
            return "not run"
        failed = picked.count("failed")
        if failed:
            return f"{failed} of {len(picked)} failed"
        return "works" if "passed" in picked else "skipped"


def parse_junit(path: Path) -> dict[str, str]:
    """`module.py::test` -> passed / failed / skipped, from pytest's JUnit XML."""
    results = {}
    for case in ET.parse(path).getroot().iter("testcase"):  # noqa: S314 - pytest wrote it, in our temp dir
        module = (case.get("classname") or "").rsplit(".", 1)[-1]
        name = f"{module}.py::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            results[name] = "failed"
        elif case.find("skipped") is not None:
            results[name] = "skipped"
        else:
            results[name] = "passed"
    return results


def run_version(version: str, python: str, extra: list[str], reports: Path) -> Outcome:
    """Build the release (outside any test timeout), then run the modules with its binaries."""
    outcome = Outcome(version)
    env = {**os.environ, "NATIVEDRA_K8S_VERSION": version}
    nativedra = str(Path(python).with_name("nativedra"))
    print(f"== {version}: building the control plane (cached after the first run)", flush=True)
    built = subprocess.run([nativedra, "cluster", "build", "--k8s-version", version], env=env, check=False)
    if built.returncode:
        outcome.error = f"build failed (exit {built.returncode})"
        return outcome
    junit = reports / f"{version}.xml"
    print(f"== {version}: {len(MODULES)} modules", flush=True)
    started = time.monotonic()
    command = [python, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", f"--junitxml={junit}", *MODULES, *extra]
    subprocess.run(command, env=env, check=False)
    outcome.seconds = time.monotonic() - started
    if junit.is_file():
        outcome.results = parse_junit(junit)
    else:
        outcome.error = "pytest wrote no report"
    return outcome


def summary(outcomes: list[Outcome]) -> str:
    """Per release: counts and time, each docs/install.md row, and the failed tests by name."""
    lines = [f"{'version':<10} {'passed':>6} {'failed':>6} {'skipped':>7} {'minutes':>7}"]
    for o in outcomes:
        counts = f"{o.count('passed'):>6} {o.count('failed'):>6} {o.count('skipped'):>7}"
        lines.append(f"{o.version:<10} {counts} {o.seconds / 60:>7.1f} {o.error}".rstrip())
    lines.append("")
    lines.append(f"{'row':<15} " + " ".join(f"{o.version:<18}" for o in outcomes))
    for row, prefixes in ROWS.items():
        lines.append(f"{row:<15} " + " ".join(f"{o.row(prefixes):<18}" for o in outcomes))
    for o in outcomes:
        failed = sorted(name for name, value in o.results.items() if value == "failed")
        if failed:
            lines.append(f"\n{o.version} failed:")
            lines.extend(f"  {name}" for name in failed)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", default=",".join(VERSIONS), help="comma-separated releases to run")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="nd-matrix-") as reports:
        for version in [v.strip() for v in args.versions.split(",") if v.strip()]:
            outcomes.append(run_version(version, sys.executable, args.pytest_args, Path(reports)))
            print(summary(outcomes), flush=True)
    print("\n== matrix, default feature gates\n" + summary(outcomes))
    return 1 if any(o.error or o.count("failed") for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
