"""`nativedra plugin` and `nativedra inventory`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from dra_driver.discovery import Backend, DiscoveryError
from dra_driver.discovery.factory import BACKENDS, make_backend
from dra_driver.discovery.simulated import profile_document
from dra_driver.inventory import Inventory
from dra_driver.kubelet_paths import DEFAULT_CDI_DIR, DEFAULT_DEV_ROOT, DEFAULT_SYS_ROOT, add_socket_flags
from dra_driver.publishing.publish_config import ConfigError, PublishConfig, load_publish_config, parse_fractions
from dra_driver.publishing.slices import devices_and_counters
from dra_driver.run import node_plugin
from nativedra.base.cmdline.flags import add_flag
from nativedra.base.kube.names import DRIVER_NAME
from nativedra.base.kube.units import GIB


def _add_discovery_flags(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--backend", choices=BACKENDS, default="nvml", help="how GPUs are discovered")
    add_flag(parser, "--profile", help="simulated backend: profile file, or a shipped name such as h100-8x")
    add_flag(parser, "--sys-root", type=Path, default=DEFAULT_SYS_ROOT, help="sysfs root (a fake tree in tests)")
    add_flag(
        parser,
        "--fault-file",
        type=Path,
        help="simulated backend: YAML `unhealthy: [index|uuid, ...]` and `faults: [{gpu: index|uuid, xid: N}]` "
        "or `{gpu, event: double-bit-ecc|gpu-lost}`",
    )
    add_flag(
        parser,
        "--driver-root",
        type=Path,
        default=Path("/"),
        help="nvml backend: where libnvidia-ml.so.1 lies (mounted read-only): the host library directory itself, "
        "or a driver root with usr/lib64, usr/lib/x86_64-linux-gnu, ... under it",
    )


def _add_publish_flags(parser: argparse.ArgumentParser) -> None:
    add_flag(parser, "--publish-config", type=Path, help="YAML file with the publish settings below")
    add_flag(parser, "--fractions", help="fixed fractions to publish, e.g. 2,4,8, or none (default 2,4,8)")
    add_flag(parser, "--mig", choices=("true", "false"), help="publish MIG placements of GPUs in MIG mode")
    add_flag(
        parser,
        "--mig-or-fractions",
        choices=("true", "false"),
        help="MIG-capable GPUs offer MIG placements or fractions, the scheduler picks per GPU "
        "(Kubernetes 1.37+ with the alpha gate DRADeviceCompatibilityGroups)",
    )
    add_flag(
        parser,
        "--fatal-fault-effect",
        choices=("NoSchedule", "NoExecute"),
        help="taint effect on the devices of a GPU with a fatal fault (XID, double-bit ECC, off the bus); "
        "NoExecute: the kube-controller-manager evicts the pods using it (default NoSchedule)",
    )
    add_flag(
        parser,
        "--sharing",
        choices=("exclusive", "consumable"),
        help="consumable: publish every GPU as a consumable share device (claims request memory/compute)",
    )


def publish_config_from(args: argparse.Namespace) -> PublishConfig:
    config = load_publish_config(args.publish_config) if args.publish_config else PublishConfig()
    overrides: dict[str, Any] = {}
    if args.fractions is not None:
        overrides["fractions"] = parse_fractions(args.fractions)
    if args.mig is not None:
        overrides["mig"] = args.mig == "true"
    if args.mig_or_fractions is not None:
        overrides["mig_or_fractions"] = args.mig_or_fractions == "true"
    if args.fatal_fault_effect is not None:
        overrides["fatal_fault_effect"] = args.fatal_fault_effect
    if args.sharing == "consumable":
        overrides["share_gpus"] = "all"
    elif args.sharing == "exclusive":
        overrides["share_gpus"] = ()
    return PublishConfig.model_validate({**config.model_dump(), **overrides}) if overrides else config


def _backend(args: argparse.Namespace) -> Backend:
    return make_backend(args.backend, args.profile, args.sys_root, args.fault_file, args.driver_root)


def _plugin(args: argparse.Namespace) -> int:
    try:
        settings = node_plugin.PluginSettings(
            node_name=args.node_name,
            backend=_backend(args),
            publish=publish_config_from(args),
            kubeconfig=args.kubeconfig,
            registry_dir=args.registry_dir,
            plugin_dir=args.plugin_dir,
            cdi_dir=args.cdi_dir,
            dev_root=args.dev_root,
            pod_uid=args.pod_uid or None,
            metrics_port=args.metrics_port,
        )
        settings.backend.discover()  # fail at start, with the reason, on a bad profile or missing NVML
    except (DiscoveryError, ConfigError) as error:
        print(f"nativedra plugin: {error}", file=sys.stderr)
        return 2
    return node_plugin.run(settings)


def inventory_rows(inventory: Inventory, config: PublishConfig) -> list[dict[str, Any]]:
    devices, _ = devices_and_counters(inventory, config)
    rows = []
    for gpu in inventory.gpus:
        kinds: dict[str, int] = {}
        for device in devices:
            if device.gpu_index == gpu.index:
                kinds[device.kind.value] = kinds.get(device.kind.value, 0) + 1
        rows.append(
            {
                "index": gpu.index,
                "vendor": gpu.vendor.value,
                "product": gpu.product_name,
                "memoryGiB": round(gpu.memory_bytes / GIB, 1),
                "numaNode": gpu.numa_node,
                "pciBusID": gpu.pci_bus_id,
                "mig": "enabled" if gpu.mig_enabled else ("capable" if gpu.mig_capable else "no"),
                "health": gpu.health.value,
                "published": kinds,
            }
        )
    return rows


def _inventory(args: argparse.Namespace) -> int:
    try:
        config = publish_config_from(args)
        inventory = _backend(args).discover()
    except (DiscoveryError, ConfigError) as error:
        print(f"nativedra inventory: {error}", file=sys.stderr)
        return 2
    if args.output == "profile":
        header = "# A simulated profile of this node's GPUs: nativedra plugin --backend simulated --profile FILE\n"
        print(header + yaml.safe_dump(profile_document(inventory), sort_keys=False), end="")
        return 0
    rows = inventory_rows(inventory, config)
    if args.output == "yaml":
        document = {"inventory": inventory.model_dump(mode="json", by_alias=True), "published": rows}
        print(yaml.safe_dump(document, sort_keys=False), end="")
        return 0
    header = f"{'IDX':>3}  {'VENDOR':<7} {'PRODUCT':<28} {'MEM GiB':>8} {'NUMA':>4}  {'PCI':<12}  {'MIG':<8} PUBLISHES"
    print(header)
    for row in rows:
        published = ", ".join(f"{count} {kind}" for kind, count in row["published"].items()) or "nothing"
        numa = "-" if row["numaNode"] is None else str(row["numaNode"])
        print(
            f"{row['index']:>3}  {row['vendor']:<7} {row['product'][:28]:<28} {row['memoryGiB']:>8} {numa:>4}  "
            f"{row['pciBusID']:<12}  {row['mig']:<8} {published}"
        )
    return 0


def register(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    plugin = subcommands.add_parser(
        "plugin",
        help="run the DRA node plugin (discovery, ResourceSlices, kubelet gRPC, CDI)",
        description="Runs on every GPU node (DaemonSet). Discovers the node's accelerators and publishes them as "
        f"resource.k8s.io/v1 ResourceSlices of driver {DRIVER_NAME}, pool = node name.",
    )
    add_flag(plugin, "--node-name", required=True, help="this node's name (downward API spec.nodeName)")
    add_flag(plugin, "--kubeconfig", type=Path, help="kubeconfig file; default: in-cluster service account")
    add_flag(plugin, "--metrics-port", type=int, default=0, help="Prometheus /metrics port (0 = off)")
    add_socket_flags(plugin)
    add_flag(plugin, "--cdi-dir", type=Path, default=DEFAULT_CDI_DIR, help="where per-claim CDI specs are written")
    add_flag(plugin, "--dev-root", type=Path, default=DEFAULT_DEV_ROOT, help="the host's /dev (device numbers for CDI)")
    _add_discovery_flags(plugin)
    _add_publish_flags(plugin)
    plugin.set_defaults(handler=_plugin)

    inventory = subcommands.add_parser(
        "inventory",
        help="show what this node would publish, without touching the cluster",
        description="Runs discovery and prints each accelerator with the devices it would publish.",
    )
    _add_discovery_flags(inventory)
    _add_publish_flags(inventory)
    inventory.add_argument(
        "-o",
        "--output",
        choices=("table", "yaml", "profile"),
        default="table",
        help="profile: a simulated profile file of exactly these GPUs (to simulate this node elsewhere)",
    )
    inventory.set_defaults(handler=_inventory)
