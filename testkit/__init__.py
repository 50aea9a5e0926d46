"""Shared harness for tests, e2e tests, benchmarks and tools: synthetic cluster objects, extender
and plugin processes on the local control plane, scenarios. Never shipped (not in the wheel) and
never imported by product code (import-linter checks both directions)."""
