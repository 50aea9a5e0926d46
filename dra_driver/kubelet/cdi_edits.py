"""Allocated devices of one claim -> the CDI spec that gives a container exactly those devices.

Pure apart from `HostDevices`, which reads device numbers from the host's /dev (a fake tree in tests).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cdi.spec import CdiDevice, ContainerEdits, DeviceNode, Mount, Spec
from dra_driver.errors import PrepareError
from dra_driver.inventory import Gpu, Vendor
from dra_driver.kubelet.opaque_config import GpuConfig, SharingStrategy
from dra_driver.publishing.published import DeviceKind, PublishedDevice
from nativedra.base.kube.names import CDI_KIND
from nativedra.base.kube.units import MIB

NVIDIA_COMMON = ("/dev/nvidiactl",)
NVIDIA_OPTIONAL = ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")  # created lazily by nvidia-modprobe
AMD_COMMON = ("/dev/kfd",)


@dataclass(frozen=True)
class MetadataMount:
    """A request's device metadata file, bind-mounted read-only where the container looks for it."""

    request: str  # base request name
    host_path: str
    container_path: str


@dataclass(frozen=True)
class ClaimDevice:
    """One allocation result of the claim, with what this node knows about the device."""

    request: str
    device: PublishedDevice
    config: GpuConfig
    share_id: str | None = None
    consumed: dict[str, int] | None = None  # consumable capacity in bytes / percent

    @property
    def gpu(self) -> Gpu:
        return self.device.gpu


class HostDevices:
    """Device numbers of the host's device nodes, read from `dev_root` (the host /dev)."""

    def __init__(self, dev_root: Path) -> None:
        self.dev_root = dev_root

    def node(self, path: str, required: bool = True) -> DeviceNode | None:
        host = self.dev_root / Path(path).relative_to("/dev")
        try:
            info = host.stat()
        except FileNotFoundError:
            if required:
                raise PrepareError("device_node", f"device node {path} is missing on the host ({host})") from None
            return None
        if stat.S_ISCHR(info.st_mode):
            kind = "c"
        elif stat.S_ISBLK(info.st_mode):
            kind = "b"
        else:
            raise PrepareError("device_node", f"{host} is not a device node")
        return DeviceNode(path=path, type=kind, major=os.major(info.st_rdev), minor=os.minor(info.st_rdev))


@dataclass(frozen=True)
class ContainerGpuLimits:
    """What the container may use of its GPU (MPS env); None: no limit, the whole GPU."""

    compute_percent: int | None = None
    memory_mib: int | None = None


def limits(claim_device: ClaimDevice) -> ContainerGpuLimits:
    """A fraction's or share's part of the GPU, narrowed further by an MPS opaque config."""
    device = claim_device.device
    percent: int | None = None
    memory_mib: int | None = None
    if device.fraction is not None:
        percent = device.fraction.of(100)
        memory_mib = device.fraction.of(claim_device.gpu.memory_bytes) // MIB
    elif device.kind is DeviceKind.SHARE and claim_device.consumed:
        percent = claim_device.consumed.get("compute")
        memory = claim_device.consumed.get("memory")
        memory_mib = memory // MIB if memory else None
    mps = claim_device.config.sharing.mps
    if claim_device.config.sharing.strategy is SharingStrategy.MPS and mps is not None:
        if mps.active_thread_percentage is not None:
            percent = min(percent or 100, mps.active_thread_percentage)
        if mps.pinned_memory_limit_mib is not None:
            memory_mib = min(memory_mib or mps.pinned_memory_limit_mib, mps.pinned_memory_limit_mib)
    return ContainerGpuLimits(percent, memory_mib)


def _env(claim_device: ClaimDevice) -> tuple[str, ...]:
    gpu = claim_device.gpu
    device = claim_device.device
    env = [f"NATIVEDRA_DEVICE_TYPE={device.kind.value}"]
    if gpu.vendor is Vendor.NVIDIA:
        env.append("CUDA_DEVICE_ORDER=PCI_BUS_ID")
    if device.kind is DeviceKind.MIG:
        env.append(f"NATIVEDRA_MIG_PROFILE={device.mig_profile}")
        env.append(f"NATIVEDRA_MIG_PLACEMENT={device.mig_start}")
    allowed = limits(claim_device)
    if allowed.compute_percent is not None:
        env.append(f"NATIVEDRA_COMPUTE_PERCENT={allowed.compute_percent}")
        if gpu.vendor is Vendor.NVIDIA:
            env.append(f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={allowed.compute_percent}")
    if allowed.memory_mib is not None:
        env.append(f"NATIVEDRA_MEMORY_LIMIT_MIB={allowed.memory_mib}")
        if gpu.vendor is Vendor.NVIDIA:
            env.append(f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={allowed.memory_mib}M")
    if claim_device.config.sharing.strategy is not SharingStrategy.EXCLUSIVE:
        env.append(f"NATIVEDRA_SHARING_STRATEGY={claim_device.config.sharing.strategy.value}")
    return tuple(env)


def _gpu_nodes(gpu: Gpu, host: HostDevices) -> tuple[DeviceNode, ...]:
    if gpu.vendor is Vendor.NVIDIA:
        nodes = [host.node(f"/dev/nvidia{gpu.minor}")]
    else:
        nodes = [host.node(f"/dev/dri/renderD{gpu.minor}")]
    return tuple(n for n in nodes if n is not None)


def _common_nodes(vendors: set[Vendor], host: HostDevices) -> tuple[DeviceNode, ...]:
    nodes: list[DeviceNode | None] = []
    if Vendor.NVIDIA in vendors:
        nodes += [host.node(p) for p in NVIDIA_COMMON] + [host.node(p, required=False) for p in NVIDIA_OPTIONAL]
    if Vendor.AMD in vendors:
        nodes += [host.node(p) for p in AMD_COMMON]
    return tuple(n for n in nodes if n is not None)


def cdi_device_name(claim_uid: str, device_name: str) -> str:
    return f"{claim_uid}-{device_name}"


def metadata_device_name(claim_uid: str, request: str) -> str:
    """`_` cannot occur in a device name (a DNS label), so this never names a GPU device."""
    return f"{claim_uid}_metadata_{request}"


def _metadata_device(claim_uid: str, mount: MetadataMount) -> CdiDevice:
    """A CDI device per request that only mounts its metadata file: the kubelet hands a container
    the CDI devices of the requests it names, so each container sees its requests' files only.
    Mount options as the kubeletplugin helper writes them (metadata.go writeCDISpec): read-only
    bind, no mount type (which would need cdiVersion 0.4.0). The helper writes a spec of its own
    per request (kind `<driver>/metadata`); ours is a device of the claim's one spec, so it is
    written, restored and removed with it."""
    return CdiDevice(
        name=metadata_device_name(claim_uid, mount.request),
        container_edits=ContainerEdits(
            mounts=(Mount(host_path=mount.host_path, container_path=mount.container_path, options=("ro", "bind")),)
        ),
    )


def claim_spec(
    claim_uid: str, devices: list[ClaimDevice], host: HostDevices, metadata: tuple[MetadataMount, ...] = ()
) -> Spec:
    """One spec per claim; each allocated device is a CDI device `<claimUID>-<device>`, in the
    order of `devices`, followed by one metadata device per request of `metadata`.

    The GPU list is a claim-wide edit: a container given several devices of the claim gets every
    device's edits, so one variable set per device would keep only the last device's value."""
    cdi_devices = tuple(
        CdiDevice(
            name=cdi_device_name(claim_uid, d.device.name),
            container_edits=ContainerEdits(env=_env(d), device_nodes=_gpu_nodes(d.gpu, host)),
        )
        for d in devices
    ) + tuple(_metadata_device(claim_uid, mount) for mount in metadata)
    uuids = ",".join(dict.fromkeys(d.gpu.uuid for d in devices))
    common = ContainerEdits(
        env=(f"NATIVEDRA_GPU_UUIDS={uuids}",),
        device_nodes=_common_nodes({d.gpu.vendor for d in devices}, host),
    )
    return Spec(kind=CDI_KIND, devices=cdi_devices, container_edits=common)
