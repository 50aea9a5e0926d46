"""Checks that need a real NVIDIA GPU (`make test-gpu`); read-only: no GPU setting is changed."""
