"""`python -m hardware.record DIR`: record this machine's NVML answers (for the replay tests under
tests/dra_driver/discovery/data/) and write the simulated profile of its GPUs. Read-only."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import yaml

from dra_driver.discovery.nvml import NvmlBackend
from dra_driver.discovery.simulated import model_name, profile_document
from hardware.conftest import driver_root
from tests.dra_driver.discovery.recorded_nvml import record


def loaded_nvml_library() -> str:
    """Which libnvidia-ml the process mapped: where the driver root really is on this machine."""
    maps = Path("/proc/self/maps").read_text().splitlines()
    return next((line.split()[-1] for line in maps if "libnvidia-ml" in line), "not mapped")


def main(out: Path) -> int:
    started = time.monotonic()
    backend = NvmlBackend(driver_root=driver_root())
    loaded_s = time.monotonic() - started
    started = time.monotonic()
    inventory = backend.discover()
    discovered_s = time.monotonic() - started
    recording = record(backend.nvml, Path("/sys"))
    document = profile_document(inventory)
    name = next(iter(document["models"]), "none")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"nvml-{name}.json").write_text(json.dumps(recording, indent=1) + "\n")
    (out / f"profile-{name}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    summary = {
        "nvmlLibrary": loaded_nvml_library(),
        "initSeconds": round(loaded_s, 3),
        "discoverSeconds": round(discovered_s, 3),
        "gpus": len(inventory.gpus),
        "models": [model_name(m) for m in document["models"].values()],
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
