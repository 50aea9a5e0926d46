"""`nativedra demo`: a local cluster with simulated GPU nodes, the examples, and a map of placements."""
