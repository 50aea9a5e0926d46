"""The names nativedra is known by in the cluster and on the node (DESIGN.md section 3). They live
at the bottom layer so that the plugin, the extender, the demo and the tests all import one
spelling; the shipped manifests repeat them, and tests/manifests check that they agree."""

from __future__ import annotations

DRIVER_NAME = "gpu.nativedra.dev"
"""The DRA driver name, which is also the attribute domain of every device the plugin publishes."""

GPU_NODE_LABEL = "nativedra.dev/gpu-node"
"""The plugin DaemonSet's nodeSelector: a node with this label set to "true" runs the plugin."""

EXTENDER_MARKER = "nativedra.dev/extender"
"""The extended resource that marks the pods the extender serves (manifests/scheduler/extender-marker-policy.yaml
adds it; the scheduler's managedResources list it): only those pods wait on the extender."""
EXTENDER_MARKER_QUANTITY = "0"
"""The marker's quantity. The scheduler sends a pod to the extender when it names a managed resource,
whatever the amount; NodeResourcesFit skips a zero request before any per-node work. At 1 it checked
the name on each of 5,000 nodes per pod (a regular expression, about 3.6 ms of CPU per pod)."""

GPU_CLASS = DRIVER_NAME
"""The shipped DeviceClasses (manifests/base/deviceclasses.yaml): whole GPUs, ..."""
FRACTION_CLASS = "gpu-fraction.nativedra.dev"
"""... fixed fractions of a GPU, ..."""
MIG_CLASS = "gpu-mig.nativedra.dev"
"""... MIG partitions, ..."""
SHARE_CLASS = "gpu-share.nativedra.dev"
"""... and consumable shares."""

EVERY_NODE_PROFILE = "nativedra"
"""The kube-scheduler profile that scores every node (percentageOfNodesToScore: 100), so a gang's
planned nodes are always offered to the extender. The second policy of
manifests/scheduler/extender-marker-policy.yaml moves the pods the extender serves to it; every other
pod keeps the default profile's adaptive share."""

WHOLE_GPU_RESOURCE = "nativedra.dev/gpu"
"""The extendedResourceName of GPU_CLASS: pods asking `nativedra.dev/gpu: N` as of a device plugin."""

CLASS_RESOURCES = (WHOLE_GPU_RESOURCE,)
"""The extended resources our DeviceClasses name (DRAExtendedResource). The scheduler's
managedResources list them beside the marker, so a pod asking for them alone is sent without being
marked. A class's implicit name (deviceclass.resource.kubernetes.io/<class>) cannot be listed there
(the scheduler refuses names in kubernetes.io domains): the marker policy marks pods asking for it."""

STANDARD_NUMA_ATTRIBUTE = "resource.kubernetes.io/numaNode"
"""KEP-6072's NUMA node attribute: every driver publishing it lets a claim's matchAttribute put its
devices beside ours on one NUMA node (a GPU and another driver's NIC, for GPUDirect RDMA)."""

CDI_VENDOR = f"k8s.{DRIVER_NAME}"
CDI_CLASS = "claim"
CDI_KIND = f"{CDI_VENDOR}/{CDI_CLASS}"
"""The kind of the plugin's per-claim CDI specs; their device ids are `<kind>=<claim UID>-<device>`."""
