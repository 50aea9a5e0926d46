"""Socket names follow the kubelet's conventions and fit a unix socket path."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.kubelet_paths import MAX_UNIX_PATH, dra_socket, registration_socket
from nativedra.base.kube.names import DRIVER_NAME


def test_socket_names_follow_kubelet_conventions() -> None:
    assert registration_socket(Path("/r")).name == f"{DRIVER_NAME}-reg.sock"
    uid = "8f3e0c9a-1b2c-4d5e-8f90-a1b2c3d4e5f6"
    assert registration_socket(Path("/r"), uid).name == f"{DRIVER_NAME}-{uid}-reg.sock"
    long_dir = Path("/" + "d" * 50)
    fallback = registration_socket(long_dir, uid)
    assert len(str(fallback)) <= MAX_UNIX_PATH and uid not in fallback.name and "/" not in fallback.name
    assert dra_socket(Path("/p"), uid).name == f"dra-{uid}.sock"
    with pytest.raises(ValueError, match="not a Kubernetes UID"):
        registration_socket(Path("/r"), "../../x")
