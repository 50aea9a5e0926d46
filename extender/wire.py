"""The kube-scheduler extender wire format (k8s.io/kube-scheduler/extender/v1).

The Go structs have no JSON tags, so fields are the Go names in PascalCase; nested Kubernetes
objects (Pod, NodeList) keep their usual lowerCamel JSON.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ExtenderArgs(_Wire):
    Pod: dict[str, Any]
    Nodes: dict[str, Any] | None = None  # a v1.NodeList when nodeCacheCapable is false
    NodeNames: list[str] | None = None  # when nodeCacheCapable is true

    def node_names(self) -> list[str]:
        if self.NodeNames is not None:
            return list(self.NodeNames)
        return [item["metadata"]["name"] for item in (self.Nodes or {}).get("items") or []]


class ExtenderFilterResult(_Wire):
    NodeNames: list[str] | None = None
    Nodes: dict[str, Any] | None = None
    FailedNodes: dict[str, str] = Field(default_factory=dict)
    FailedAndUnresolvableNodes: dict[str, str] = Field(default_factory=dict)
    Error: str = ""


class HostPriority(_Wire):
    Host: str
    Score: int = Field(ge=0, le=10)


def filter_result(args: ExtenderArgs, passing: list[str], failed: dict[str, str]) -> ExtenderFilterResult:
    """Answer in the form the scheduler reads: NodeNames when it sent NodeNames, else Nodes."""
    if args.NodeNames is not None:
        return ExtenderFilterResult(NodeNames=passing, FailedNodes=failed)
    keep = set(passing)
    items = [item for item in (args.Nodes or {}).get("items") or [] if item["metadata"]["name"] in keep]
    nodes = {**(args.Nodes or {}), "items": items}
    return ExtenderFilterResult(Nodes=nodes, FailedNodes=failed)
