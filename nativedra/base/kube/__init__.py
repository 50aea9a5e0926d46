"""Kubernetes facts every nativedra component shares: the API client, resource references,
quantities and how a pod names its claims. No nativedra imports: this is the bottom layer."""
