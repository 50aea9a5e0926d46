"""The simulated backend: GPUs described by a profile file, for tests, demos and dry runs.

A profile states exactly what NVML (or sysfs) would report, so a simulated H100 yields the
inventory the nvml backend yields for a real H100.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from dra_driver.discovery import DiscoveryError
from dra_driver.faults import NAMED_FAULTS, xid_fault
from dra_driver.inventory import UNSPECIFIED_FAULT, Fault, Gpu, Inventory

PROFILE_KEYS = {"driverVersion", "cudaDriverVersion", "models", "gpus"}


class ProfileError(DiscoveryError):
    """The profile file is invalid; the message names the file, the GPU and the field."""


def packaged_profiles() -> dict[str, Path]:
    folder = resources.files("dra_driver") / "profiles"
    return {Path(entry.name).stem: Path(str(entry)) for entry in folder.iterdir() if entry.name.endswith(".yaml")}


def resolve_profile(name_or_path: str) -> Path:
    """A path to an existing file, or the name of a profile shipped with nativedra."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = packaged_profiles()
    if name_or_path in shipped:
        return shipped[name_or_path]
    raise ProfileError(
        f"profile {name_or_path!r}: no such file, and not a shipped profile ({', '.join(sorted(shipped))})"
    )


def _describe(issue: Any) -> str:
    location = ".".join(str(part) for part in issue["loc"])
    return f"field {location!r}: {issue['msg']}" if location else issue["msg"]


def parse_profile(raw: object, source: str) -> Inventory:
    if not isinstance(raw, dict):
        raise ProfileError(f"{source}: expected a mapping with keys {sorted(PROFILE_KEYS)}")
    unknown = set(raw) - PROFILE_KEYS
    if unknown:
        raise ProfileError(f"{source}: unknown field(s) {sorted(unknown)}; allowed: {sorted(PROFILE_KEYS)}")
    models = raw.get("models") or {}
    if not isinstance(models, dict):
        raise ProfileError(f"{source}: field 'models' must map model names to GPU facts")
    entries = raw.get("gpus") or []
    if not isinstance(entries, list):
        raise ProfileError(f"{source}: field 'gpus' must be a list")
    gpus = []
    seen: dict[int, int] = {}
    for position, entry in enumerate(entries):
        where = f"{source}: gpus[{position}]"
        if not isinstance(entry, dict):
            raise ProfileError(f"{where}: expected a mapping")
        if "index" in entry:
            where += f" (index {entry['index']})"
        facts = dict(entry)
        model_name = facts.pop("model", None)
        if model_name is not None:
            if model_name not in models:
                raise ProfileError(f"{where}: field 'model': unknown model {model_name!r}")
            facts = {**models[model_name], **facts}
        try:
            gpu = Gpu.model_validate_json(json.dumps(facts))
        except ValidationError as error:
            raise ProfileError(f"{where}: " + "; ".join(_describe(i) for i in error.errors())) from error
        if gpu.index in seen:
            raise ProfileError(
                f"{where}: field 'index': duplicate GPU index {gpu.index} (also gpus[{seen[gpu.index]}])"
            )
        seen[gpu.index] = position
        gpus.append(gpu)
    node_facts = {key: raw[key] for key in ("driverVersion", "cudaDriverVersion") if key in raw}
    try:
        return Inventory.model_validate_json(json.dumps(node_facts)).model_copy(
            update={"gpus": tuple(sorted(gpus, key=lambda g: g.index))}
        )
    except ValidationError as error:
        raise ProfileError(f"{source}: " + "; ".join(_describe(i) for i in error.errors())) from error


def load_profile(path: Path) -> Inventory:
    try:
        text = path.read_text()
    except OSError as error:
        raise ProfileError(f"{path}: cannot read profile: {error.strerror}") from error
    try:
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise ProfileError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {error}") from error
    return parse_profile(raw, str(path))


# What differs between two GPUs of one model on one node; everything else is the model's.
PER_GPU_FIELDS = frozenset({"index", "minor", "uuid", "pci_bus_id", "pcie_root", "numa_node", "health", "mig_enabled"})


def model_facts(gpu: Gpu) -> dict[str, Any]:
    """The facts every GPU of this model shares, as a profile's `models` entry writes them."""
    return gpu.model_dump(mode="json", by_alias=True, exclude=set(PER_GPU_FIELDS))


def model_name(facts: dict[str, Any]) -> str:
    """`NVIDIA H200` -> `nvidia-h200`: a readable key for the profile's `models`."""
    return re.sub(r"[^a-z0-9]+", "-", str(facts["productName"]).lower()).strip("-")


def shipped_models(product_name: str) -> list[dict[str, Any]]:
    """The distinct models of that product name across the shipped profiles."""
    models: list[dict[str, Any]] = []
    for path in sorted(packaged_profiles().values()):
        for gpu in load_profile(path).gpus:
            if gpu.product_name == product_name and model_facts(gpu) not in models:
                models.append(model_facts(gpu))
    return models


def profile_document(inventory: Inventory) -> dict[str, Any]:
    """A profile that makes the simulated backend discover exactly `inventory` (healthy): how an
    admin turns a real node into one the demo cluster and the tests can run."""
    models: dict[str, dict[str, Any]] = {}
    gpus = []
    for gpu in inventory.gpus:
        facts = {key: value for key, value in model_facts(gpu).items() if value is not None}
        name = model_name(facts)
        suffix = 2
        while name in models and models[name] != facts:
            name, suffix = f"{model_name(facts)}-{suffix}", suffix + 1
        models[name] = facts
        own = gpu.model_dump(mode="json", by_alias=True, include=set(PER_GPU_FIELDS - {"health"}))
        kept = {key: value for key, value in own.items() if value is not None and value is not False}
        gpus.append({"model": name, **kept})
    node = inventory.model_dump(mode="json", by_alias=True, exclude={"gpus"}, exclude_none=True)
    return {**node, "models": models, "gpus": gpus}


FAULT_KEYS = {"unhealthy", "faults"}


def _fault_entry(entry: object, where: str) -> tuple[str, Fault]:
    """One `faults:` entry: `{gpu: index|uuid, xid: N}` or `{gpu, event: double-bit-ecc|gpu-lost}`."""
    if not isinstance(entry, dict) or "gpu" not in entry or len(entry) != 2 or not ({"xid", "event"} & set(entry)):
        raise ProfileError(f"{where}: expected {{gpu: index or UUID, xid: N}} or {{gpu, event: ...}}")
    if isinstance(entry["gpu"], bool) or not isinstance(entry["gpu"], int | str):
        raise ProfileError(f"{where}: field 'gpu' must be a GPU index or UUID")
    if "xid" in entry:
        xid = entry["xid"]
        if not isinstance(xid, int) or isinstance(xid, bool):
            raise ProfileError(f"{where}: field 'xid' must be an integer")
        try:
            return str(entry["gpu"]), xid_fault(xid)
        except ValueError as error:
            raise ProfileError(f"{where}: field 'xid': {error}") from error
    event = entry["event"]
    if event not in NAMED_FAULTS:
        raise ProfileError(f"{where}: field 'event' must be one of {sorted(NAMED_FAULTS)}")
    return str(entry["gpu"]), NAMED_FAULTS[event]


def load_faults(path: Path) -> dict[str, Fault]:
    """GPU index or UUID -> the fault a fault file gives it (the stand-in for NVML's events):
    `unhealthy: [0, GPU-...]` (fatal, reason not given) and `faults: [{gpu: 3, xid: 79}]`."""
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        return {}
    except (OSError, yaml.YAMLError) as error:
        raise ProfileError(f"fault file {path}: {error}") from error
    if not isinstance(raw, dict) or set(raw) - FAULT_KEYS:
        raise ProfileError(f"fault file {path}: expected a mapping with keys {sorted(FAULT_KEYS)}")
    unhealthy, listed = raw.get("unhealthy"), raw.get("faults")
    unhealthy, listed = [] if unhealthy is None else unhealthy, [] if listed is None else listed
    if not isinstance(unhealthy, list) or any(isinstance(i, bool) or not isinstance(i, int | str) for i in unhealthy):
        raise ProfileError(f"fault file {path}: field 'unhealthy' must be a list of GPU indexes or UUIDs")
    if not isinstance(listed, list):
        raise ProfileError(f"fault file {path}: field 'faults' must be a list")
    faults = {str(item): UNSPECIFIED_FAULT for item in unhealthy}
    for position, entry in enumerate(listed):
        gpu, fault = _fault_entry(entry, f"fault file {path}: faults[{position}]")
        faults[gpu] = fault.over(faults.get(gpu))
    return faults


def _with_faults(gpu: Gpu, faults: dict[str, Fault]) -> Gpu:
    for selector in (str(gpu.index), gpu.uuid):
        if selector in faults:
            gpu = gpu.with_fault(faults[selector])
    return gpu


class SimulatedBackend:
    """Reads the profile (and the fault file, which stands in for hardware errors) on every
    discovery; a change of either file triggers re-publishing."""

    name = "simulated"
    can_prepare_mig = True  # no hardware: a placement is described to the container, not created

    def __init__(self, profile: str, fault_file: Path | None = None, poll_interval_s: float = 1.0) -> None:
        self.path = resolve_profile(profile)
        self.fault_file = fault_file
        self.poll_interval_s = poll_interval_s

    def discover(self) -> Inventory:
        inventory = load_profile(self.path)
        faults = load_faults(self.fault_file) if self.fault_file else {}
        if not faults:
            return inventory
        known = {str(gpu.index) for gpu in inventory.gpus} | {gpu.uuid for gpu in inventory.gpus}
        unknown = sorted(set(faults) - known)
        if unknown:
            raise ProfileError(f"fault file {self.fault_file}: no GPU {', '.join(unknown)} on this node")
        return inventory.model_copy(update={"gpus": tuple(_with_faults(gpu, faults) for gpu in inventory.gpus)})

    def _fingerprint(self) -> tuple[tuple[float, int] | None, ...]:
        stamps: list[tuple[float, int] | None] = []
        for path in (self.path, self.fault_file):
            try:
                stat = path.stat() if path else None
            except OSError:
                stat = None
            stamps.append((stat.st_mtime, stat.st_size) if stat else None)
        return tuple(stamps)

    def watch(self, stop: threading.Event, changed: Callable[[], None]) -> None:
        last = self._fingerprint()
        while not stop.wait(self.poll_interval_s):
            current = self._fingerprint()
            if current != last:
                last = current
                changed()
