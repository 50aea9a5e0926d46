"""Who may have spare nodes kept for a gang (`nativedra.dev/spares`), and how many: an admin's grant
in the extender's configuration. Any pod may carry the annotation; only the grant makes it keep
capacity from others, so a namespace user cannot hold other teams' nodes by writing it. Off unless
the admin names namespaces or a priority."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class SparesGrant(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)
    # Namespaces whose gangs may have spares kept.
    namespaces: tuple[str, ...] = ()
    # Gangs at this priority or higher may have spares kept, in any namespace: who may use a
    # PriorityClass is the admin's (ResourceQuota scopes), so this grant follows it.
    min_priority: int | None = None
    # Spare nodes one gang may keep.
    max_per_gang: Annotated[int, Field(ge=0, le=1024)] = 2
    # Of the nodes of a gang's domain (the narrowest topology level its nodes share), the share that
    # all gangs' spares together may keep; and of the cluster's nodes. Rounded down.
    max_domain_share: Annotated[float, Field(ge=0, le=1)] = 0.125
    max_cluster_share: Annotated[float, Field(ge=0, le=1)] = 0.05

    @property
    def enabled(self) -> bool:
        return bool(self.namespaces) or self.min_priority is not None

    def allows(self, namespace: str, priority: int) -> bool:
        return namespace in self.namespaces or (self.min_priority is not None and priority >= self.min_priority)

    def refusal(self, namespace: str, priority: int) -> str | None:
        """Why a gang of `namespace` at `priority` may have no spare, naming the setting; None if it may."""
        if self.allows(namespace, priority):
            return None
        if not self.enabled:
            return "no spares are granted on this cluster (extender config spares.namespaces, spares.minPriority)"
        granted = f"namespaces {', '.join(self.namespaces)}" if self.namespaces else "no namespace"
        floor = f"priority {self.min_priority} or higher" if self.min_priority is not None else "no priority"
        return (
            f"spares are granted to {granted} and to {floor} (extender config spares.namespaces, spares.minPriority), "
            f"not to namespace {namespace} at priority {priority}"
        )
