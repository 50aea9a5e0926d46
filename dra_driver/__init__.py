"""The nativedra DRA kubelet plugin: discovery, ResourceSlices, kubelet gRPC, CDI."""
