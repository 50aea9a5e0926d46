"""The nativedra DRA kubelet plugin: discovery, ResourceSlices, kubelet gRPC, CDI."""

DRIVER_NAME = "gpu.nativedra.dev"
