"""A MicroTime on a whole second survives the typed client's model, as the API server needs it
(with a fraction): on the plain strftime the client wrote "...:40+00:00" and the server refused the
Lease with 400."""

from __future__ import annotations

import re

import pytest
from kubernetes import client

from nativedra.base.kube.micro_time import micro_time

SERVER_FORMAT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$")  # Go's RFC3339Micro


@pytest.mark.parametrize("seconds", [1e9, 1e9 + 0.5, 1_796_000_000.000001])
def test_a_stamp_reaches_the_server_with_its_fraction(seconds: float) -> None:
    body = {"metadata": {"name": "l"}, "spec": {"acquireTime": micro_time(seconds), "renewTime": micro_time(seconds)}}
    sent = client.ApiClient().sanitize_for_serialization(client.V1Lease.from_dict(body))
    assert SERVER_FORMAT.match(sent["spec"]["acquireTime"]), sent
    assert abs(client.V1Lease.from_dict(body).spec.acquire_time.timestamp() - seconds) <= 1e-6
