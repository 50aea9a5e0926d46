"""What a GPU fault means for the work on it, from what NVML reports. Pure.

An XID that an application causes itself (an illegal address, a page fault in its own context)
leaves the GPU fit for other work: non-fatal, new work is only kept off it until the plugin
restarts. Every other XID, a double-bit ECC error and a GPU gone from the bus are fatal: what runs
there is broken, and with the NoExecute effect the kube-controller-manager evicts it."""

from __future__ import annotations

from dra_driver.inventory import Fault

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
XID_MEANINGS = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failure",
    68: "video processor exception",
    69: "graphics engine class error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    109: "context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}
MAX_XID = 1 << 31

DOUBLE_BIT_ECC = Fault(reason="double-bit-ecc", fatal=True, description="double-bit ECC error")
GPU_LOST = Fault(reason="gpu-lost", fatal=True, description="GPU is no longer reachable")
NAMED_FAULTS = {fault.reason: fault for fault in (DOUBLE_BIT_ECC, GPU_LOST)}


def xid_fault(xid: int) -> Fault:
    """The fault of one XID event."""
    if not 0 <= xid < MAX_XID:
        raise ValueError(f"XID {xid} is out of range")
    meaning = XID_MEANINGS.get(xid, "see NVIDIA's XID catalogue")
    fatal = xid not in APPLICATION_XIDS
    return Fault(reason=f"xid-{xid}", fatal=fatal, description=f"XID {xid} ({meaning})")


def taint_effect(fault: Fault, fatal_effect: str) -> str:
    """The taint effect for `fault`: the admin's choice for fatal faults, NoSchedule otherwise."""
    return fatal_effect if fault.fatal else "NoSchedule"
