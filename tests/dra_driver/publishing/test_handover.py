"""Which plugin instance publishes a node's slices while two run (a rolling update with surge):
the one that started later, while it answers on its registration socket."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from dra_driver.kubelet_paths import registration_socket
from dra_driver.publishing.handover import PUBLISHER_ANNOTATION, Instance, newer_instance, serving_kubelet

OLD = Instance("11111111-1111-1111-1111-111111111111", 1_000.5)
NEW = Instance("22222222-2222-2222-2222-222222222222", 1_060.25)


def _slice(stamp: str | None) -> dict[str, Any]:
    annotations = {PUBLISHER_ANNOTATION: stamp} if stamp is not None else {}
    return {"metadata": {"name": "s", "annotations": annotations}}


def test_a_stamp_names_the_instance_and_a_bad_one_names_none() -> None:
    assert Instance.parse(NEW.stamp()) == NEW
    for bad in (None, "", "soon/uid", "12.5", "nan/uid", "inf/uid", "/uid"):
        assert Instance.parse(bad) is None, bad


def test_an_instance_yields_only_to_a_later_one_that_is_alive() -> None:
    alive = {NEW.pod_uid}
    assert newer_instance(OLD, [_slice(None), _slice(NEW.stamp())], alive.__contains__) == NEW
    assert newer_instance(NEW, [_slice(OLD.stamp())], {OLD.pod_uid}.__contains__) is None, "older: overwritten"
    assert newer_instance(OLD, [_slice(NEW.stamp())], set[str]().__contains__) is None, "gone: taken back"
    assert newer_instance(OLD, [_slice(OLD.stamp()), _slice("garbage")], alive.__contains__) is None
    restarted = Instance(OLD.pod_uid, 2_000.0)
    assert newer_instance(OLD, [_slice(restarted.stamp())], {OLD.pod_uid}.__contains__) is None, "its own pod"


def test_alive_means_answering_on_the_registration_socket(tmp_path: Path) -> None:
    alive = serving_kubelet(tmp_path, timeout_s=0.5)
    path = registration_socket(tmp_path, NEW.pod_uid)
    assert not alive(NEW.pod_uid), "no socket"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)
        assert alive(NEW.pod_uid)
    assert path.exists() and not alive(NEW.pod_uid), "a socket file its process left behind refuses"
    assert not alive("../../etc"), "not a UID"
