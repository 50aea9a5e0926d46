"""Prometheus metrics of the extender's HTTP surface (`nativedra_extender_*`; preemption has its own)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter("nativedra_extender_requests_total", "Extender calls by verb and path taken", ["verb", "path"])
SECONDS = Histogram(
    "nativedra_extender_request_seconds",
    "Time to answer an extender call",
    ["verb"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
BAD_REQUESTS = Counter(
    "nativedra_extender_bad_requests_total", "Extender calls refused as malformed (400) or oversized (413)", ["verb"]
)
REJECTED_NODES = Counter("nativedra_extender_rejected_nodes_total", "Nodes filtered out, by path", ["path"])
BUSY = Counter("nativedra_extender_busy_total", "Calls answered 503 because the planning queue was full", ["verb"])
CLIENTS_REFUSED = Counter(
    "nativedra_extender_clients_refused_total",
    "TLS connections closed after the handshake: the client certificate names no accepted identity",
)
CERTIFICATE_EXPIRY = Gauge(
    "nativedra_extender_certificate_expiry_seconds",
    "Seconds until the earliest notAfter in the serving certificate file or the client CA file (negative: expired)",
    ["file"],
)
