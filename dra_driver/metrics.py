"""Prometheus metrics of the node plugin (`nativedra_*`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

SLICES_PUBLISHED = Gauge("nativedra_resourceslices_published", "ResourceSlices this plugin currently publishes")
DEVICES_PUBLISHED = Gauge("nativedra_devices_published", "Devices in this plugin's ResourceSlices")
SLICE_WRITES = Counter("nativedra_resourceslice_writes_total", "ResourceSlice API writes by verb", ["verb"])
RECONCILE_ERRORS = Counter("nativedra_resourceslice_reconcile_errors_total", "Failed ResourceSlice reconciliations")
