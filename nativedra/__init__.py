"""nativedra: GPU workloads on Kubernetes as native Pods."""

__version__ = "0.1.0"
