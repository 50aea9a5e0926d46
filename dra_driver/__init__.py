"""The nativedra DRA kubelet plugin: discovery, ResourceSlices, kubelet gRPC, CDI."""

from kube.names import DRIVER_NAME as DRIVER_NAME  # for modules not yet importing kube.names
