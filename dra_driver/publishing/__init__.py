"""Publishing this node's devices: the node's device state (`node_devices`), the devices as published
(`published`), the ResourceSlices built from the inventory (`slices`, shaped by `publish_config`),
their writer (`publisher`), which of two plugin pods publishes during a rolling update
(`handover`), the fields the API server serves (`api_features`) and the loop that keeps the slices
current (`slice_controller`)."""
