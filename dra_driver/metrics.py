"""Prometheus metrics of the node plugin (`nativedra_*`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

SLICES_PUBLISHED = Gauge("nativedra_resourceslices_published", "ResourceSlices this plugin currently publishes")
DEVICES_PUBLISHED = Gauge("nativedra_devices_published", "Devices in this plugin's ResourceSlices")
SLICE_WRITES = Counter("nativedra_resourceslice_writes_total", "ResourceSlice API writes by verb", ["verb"])
RECONCILE_ERRORS = Counter("nativedra_resourceslice_reconcile_errors_total", "Failed ResourceSlice reconciliations")

PREPARE_SECONDS = Histogram(
    "nativedra_claim_operation_seconds",
    "Duration of NodePrepareResources / NodeUnprepareResources per claim",
    ["operation"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
CLAIM_ERRORS = Counter("nativedra_claim_errors_total", "Failed claim operations by reason", ["operation", "reason"])
PREPARED_CLAIMS = Gauge("nativedra_prepared_claims", "Claims currently prepared on this node")
GPU_FAULTS = Counter(
    "nativedra_gpu_faults_total", "GPU faults seen (a new fault of a GPU), by reason and fatality", ["reason", "fatal"]
)
FAULT_POD_EVENTS = Counter(
    "nativedra_gpu_fault_pods_total",
    "Pods told that a GPU they use has failed, by the taint effect they were told of "
    "(NoExecute: the kube-controller-manager evicts them)",
    ["effect"],
)
