"""What a pod needs from our driver: its claims' requests (from the claim, else its template), and
what it asks of other drivers beside them (partners, for NUMA alignment)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from extender.devices.taints import Selection, Toleration, tolerations_of
from extender.pods.facts import PodClaims, PodFacts
from nativedra.base.kube.names import STANDARD_NUMA_ATTRIBUTE
from nativedra.base.kube.pods import CLASS_RESOURCE_PREFIX
from nativedra.base.kube.units import quantity


@dataclass(frozen=True)
class Partner:
    """The pod's request for another driver's device (a NIC, CPUs). Not ours to place, but a node
    scores higher where it fits beside our devices on one NUMA node (the standard attribute); and
    when a claim's matchAttribute on that attribute ties it to one of our requests (that request's
    `partners`), a node fits only where it does, as the allocator requires."""

    selectors: tuple[str, ...]  # DeviceClass CEL + request CEL
    count: int


@dataclass(frozen=True)
class Request:
    selectors: tuple[str, ...]  # DeviceClass CEL + request CEL
    count: int
    capacity: tuple[tuple[str, Decimal], ...] = ()  # consumable capacity asked of a shared device
    match_attribute: str | None = None  # all devices of the request share this attribute's value
    all_devices: bool = False
    partners: tuple[Partner, ...] = ()  # other drivers' requests on the same NUMA node (constraint)
    tolerations: tuple[Toleration, ...] = ()  # of device taints (a diagnostics pod on a failed GPU)
    # What decides which devices the request matches, made once: the Matcher's cache key.
    selection: Selection = field(init=False, repr=False, compare=False, default=((), ()))

    def __post_init__(self) -> None:
        object.__setattr__(self, "selection", (self.selectors, self.tolerations))


ClaimRequests = tuple[tuple[Request, ...], tuple[Partner, ...]]


@dataclass(frozen=True)
class Demand:
    requests: tuple[Request, ...]
    # Objects the pod needs that the watches have not delivered yet (claim, template, DeviceClass):
    # until they arrive the pod's demand is unknown, never "nothing".
    unresolved: tuple[str, ...] = ()
    # Other drivers' devices the pod asks for beside ours (only with some of ours).
    partners: tuple[Partner, ...] = ()
    # A demand keys the fit cache, asked once per (node, gang) of a plan: its hash walks every
    # request's selectors, so it is worked out once.
    _hash: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.requests, self.unresolved, self.partners)))

    def __hash__(self) -> int:
        return self._hash

    @property
    def devices(self) -> int:
        return sum(r.count for r in self.requests)

    @property
    def needs_devices(self) -> bool:
        """True when the pod asks for our devices, or may once its objects are seen."""
        return bool(self.requests or self.unresolved)


def _class_selectors(classes: Mapping[str, dict[str, Any]], name: str) -> tuple[str, ...] | None:
    device_class = classes.get(name)
    if device_class is None:
        return None
    return tuple(s["cel"]["expression"] for s in (device_class.get("spec") or {}).get("selectors") or [] if "cel" in s)


def requests_of(spec: dict[str, Any], classes: Mapping[str, dict[str, Any]], driver: str) -> ClaimRequests | None:
    """Requests of a ResourceClaimSpec for our devices, and its partners (other drivers' devices);
    None if a DeviceClass it names does not exist (yet)."""
    devices = spec.get("devices") or {}
    constraints = devices.get("constraints") or []
    ours: list[tuple[str, Request]] = []
    theirs: list[tuple[str, tuple[str, ...], int]] = []
    for request in devices.get("requests") or []:
        exactly = request.get("exactly") or next(iter(request.get("firstAvailable") or []), None)
        if not exactly:
            continue
        class_selectors = _class_selectors(classes, exactly.get("deviceClassName", ""))
        if class_selectors is None:
            return None
        selectors = class_selectors + tuple(
            s["cel"]["expression"] for s in exactly.get("selectors") or [] if "cel" in s
        )
        count = int(exactly.get("count") or 1)
        if not any(driver in s for s in class_selectors):
            if exactly.get("allocationMode") != "All":  # another driver's device: a partner
                theirs.append((request["name"], selectors, count))
            continue
        match = next(
            (
                c["matchAttribute"]
                for c in constraints
                if c.get("matchAttribute") and (not c.get("requests") or request["name"] in c["requests"])
            ),
            None,
        )
        capacity = tuple(
            sorted((k, quantity(v)) for k, v in ((exactly.get("capacity") or {}).get("requests") or {}).items())
        )
        ours.append(
            (
                request["name"],
                Request(
                    selectors=selectors,
                    count=count,
                    capacity=capacity,
                    match_attribute=match,
                    all_devices=exactly.get("allocationMode") == "All",
                    tolerations=tolerations_of(exactly.get("tolerations")),
                ),
            )
        )
    partners = {name: Partner(selectors, count) for name, selectors, count in theirs}
    untied = dict(partners)
    requests = tuple(_with_partners(name, request, untied, constraints) for name, request in ours)
    return requests, tuple(partners.values())


def _with_partners(
    name: str, request: Request, untied: dict[str, Partner], constraints: list[dict[str, Any]]
) -> Request:
    """`request` with the partners that a constraint on the standard NUMA attribute ties to it, taken
    out of `untied`: each partner goes to the first of our requests it shares such a constraint with."""
    if request.match_attribute != STANDARD_NUMA_ATTRIBUTE:
        return request
    tied = []
    for partner_name, partner in list(untied.items()):
        if any(
            c.get("matchAttribute") == STANDARD_NUMA_ATTRIBUTE
            and (not c.get("requests") or (partner_name in c["requests"] and name in c["requests"]))
            for c in constraints
        ):
            tied.append(partner)
            del untied[partner_name]
    return replace(request, partners=tuple(tied)) if tied else request


def demand_of(
    pod: PodFacts,
    claims: Mapping[tuple[str, str], dict[str, Any]],
    templates: Mapping[tuple[str, str], dict[str, Any]],
    classes: Mapping[str, dict[str, Any]],
    driver: str,
    *,
    include_allocated: bool = False,
    read: PodClaims | None = None,
) -> Demand:
    """Unallocated claims' requests; an allocated claim (e.g. shared) needs nothing more.

    With `include_allocated`, the pod's whole shape: what a member like it needs (gang planning
    uses a bound member to stand for members not created yet)."""
    namespace, read = pod.key[0], read or pod.read_claims()
    requests: list[Request] = []
    partners: list[Partner] = []
    unresolved: list[str] = []
    for reference in read.refs:
        claim_name = reference.claim
        claim = claims.get((namespace, claim_name)) if claim_name else None
        if claim is not None:
            if (claim.get("status") or {}).get("allocation") and not include_allocated:
                continue
            spec = claim.get("spec") or {}
        elif reference.template:
            template = templates.get((namespace, reference.template))
            if template is None:
                unresolved.append(f"ResourceClaimTemplate {namespace}/{reference.template}")
                continue
            spec = (template.get("spec") or {}).get("spec") or {}
        else:
            unresolved.append(f"ResourceClaim {namespace}/{claim_name}")
            continue
        found = requests_of(spec, classes, driver)
        if found is None:
            unresolved.append(f"a DeviceClass of claim {reference.name!r}")
        else:
            requests.extend(found[0])
            partners.extend(found[1])
    special = read.extended_claim
    allocated = special is not None and ((claims.get((namespace, special)) or {}).get("status") or {}).get("allocation")
    if include_allocated or not allocated:
        requests.extend(extended_requests(read.extended, classes, driver))
    return Demand(tuple(requests), tuple(unresolved), tuple(partners) if requests else ())


def extended_requests(
    asked: tuple[tuple[str, int], ...], classes: Mapping[str, dict[str, Any]], driver: str
) -> list[Request]:
    """What the pod's extended resources ask of our devices (DRAExtendedResource): each resource
    named by one of our DeviceClasses (its extendedResourceName, or the implicit
    deviceclass.resource.kubernetes.io/<class>) is a request of that many devices of the class,
    as the scheduler's special claim for the pod will ask. Other extended resources are a device
    plugin's, not ours."""
    if not asked:
        return []
    by_resource = {}
    for name, device_class in classes.items():
        by_resource[CLASS_RESOURCE_PREFIX + name] = name
        named = (device_class.get("spec") or {}).get("extendedResourceName")
        if named:
            by_resource[named] = name
    requests = []
    for resource, count in asked:
        class_name = by_resource.get(resource)
        selectors = _class_selectors(classes, class_name) if class_name else None
        if selectors is not None and count > 0 and any(driver in s for s in selectors):
            requests.append(Request(selectors=selectors, count=count))
    return requests


def _reserved_for(claim: dict[str, Any], pod: PodFacts) -> bool:
    return any(
        consumer.get("resource") == "pods"
        and consumer.get("name") == pod.key[1]
        and (not pod.uid or consumer.get("uid") in (None, pod.uid))
        for consumer in (claim.get("status") or {}).get("reservedFor") or []
    )


def allocated_node(
    pod: PodFacts, claims: Mapping[tuple[str, str], dict[str, Any]], driver: str, read: PodClaims | None = None
) -> str | None:
    """The node a pod's claim was allocated on for this pod, before the pod has a nodeName.

    The scheduler writes a claim's allocation (reserved for the pod) before it binds the pod: in
    between, the pod's devices are already in use, so the pod is placed, not waiting. A shared
    claim allocated earlier for other pods does not place this one until it is reserved for it."""
    namespace = pod.key[0]
    for claim_name in (read or pod.read_claims()).names:
        claim = claims.get((namespace, claim_name))
        if claim is None or not _reserved_for(claim, pod):
            continue
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in allocation.get("devices", {}).get("results") or []:
            if result.get("driver") == driver and result.get("pool"):
                return str(result["pool"])
    return None
