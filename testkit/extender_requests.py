"""Extender request bodies shared by the HTTP unit tests and the e2e abuse tests: a well-formed
pod, and malformed bodies with the field each error must name."""

from __future__ import annotations

import json
from typing import Any

from extender.pods.gang import GANG, GANG_SIZE

GANG_LABELS = {GANG: "g", GANG_SIZE: "2"}
CLAIMS = [{"name": "gpus", "resourceClaimTemplateName": "t"}]


def request_pod(**parts: Any) -> dict[str, Any]:
    metadata = {"name": "p", "namespace": "ns", "uid": "u", **parts.pop("metadata", {})}
    return {"metadata": metadata, "spec": {"containers": [], **parts.pop("spec", {})}, **parts}


def request_body(pod: Any, **rest: Any) -> bytes:
    return json.dumps({"Pod": pod, "NodeNames": ["n1", "n2"], **rest}).encode()


DEEP = b'{"Pod": ' + json.dumps(request_pod()).encode() + b', "NodeNames": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
MALFORMED: dict[str, tuple[bytes, str]] = {
    "pod without metadata": (request_body({"spec": {}}), "Pod.metadata"),
    "pod without namespace": (request_body({"metadata": {"name": "p"}, "spec": {}}), "Pod.metadata.namespace"),
    "labels as a list": (request_body(request_pod(metadata={"labels": ["a"]})), "Pod.metadata.labels"),
    "resourceClaims as a dict": (
        request_body(request_pod(spec={"resourceClaims": {"gpus": {}}})),
        "Pod.spec.resourceClaims",
    ),
    "bad Nodes items": (
        json.dumps(
            {"Pod": request_pod(), "Nodes": {"items": [{"metadata": {"name": "a"}}, {"metadata": {}}]}}
        ).encode(),
        "Nodes.items.1.metadata.name",
    ),
    "lone surrogate in a node name": (request_body(request_pod(), NodeNames=["n1", "n\ud800"]), "NodeNames.1"),
    "a node name that is not a string": (request_body(request_pod(), NodeNames=["n1", 7]), "NodeNames.1"),
    "invalid UTF-8 in a node name": (
        request_body(request_pod(), NodeNames=["n1", "nX"]).replace(b"nX", b"n\xff"),
        "NodeNames.1",
    ),
    "priority as text": (request_body(request_pod(spec={"priority": "high"})), "Pod.spec.priority"),
    "an extended resource that is no quantity": (
        request_body(
            request_pod(spec={"containers": [{"name": "c", "resources": {"limits": {"example.com/gpu": "lots"}}}]})
        ),
        "Pod': container 'c', resource 'example.com/gpu'",
    ),
    "100k-deep nesting": (DEEP, "nests deeper than"),
    "gang pod in phase Failed": (
        request_body(
            request_pod(metadata={"labels": GANG_LABELS}, spec={"resourceClaims": CLAIMS}, status={"phase": "Failed"})
        ),
        "Pod.status.phase",
    ),
}
