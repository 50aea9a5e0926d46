"""Keeping the cyclic collector off the extender's long-lived objects without leaking.

The listed objects, node models and plans live until replaced and are acyclic (refcounting frees
them); a full collection walking them stalls a call for hundreds of ms at 5,000 nodes, so they
are frozen out of the collector's sight. Freezing moves *every* tracked object, garbage awaiting
collection included, where no collection ever looks again: cycles not yet collected (requests',
responses' and exceptions' frames) leaked a few MiB a minute under churn. So the young objects
are collected first: that walks only what is not frozen yet, never the frozen heap.
"""

from __future__ import annotations

import gc


def freeze_survivors() -> None:
    """Collect the objects not yet frozen, then freeze what survives."""
    gc.collect()
    gc.freeze()
