"""The local scheduler wires in the extender with the same choices as the shipped manifest; only
where the extender is and how it is reached differ."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from nativedra.base.kube.names import EVERY_NODE_PROFILE
from nativedra.cluster.pki import extender_tls
from nativedra.cluster.scheduler_config import scheduler_extra

MANIFEST = Path(__file__).resolve().parents[3] / "manifests" / "scheduler" / "kube-scheduler-config.yaml"
WHERE = {"urlPrefix", "tlsConfig"}  # the manifest's in-cluster service and certificate paths


def _shipped() -> dict[str, Any]:
    return dict(yaml.safe_load(MANIFEST.read_text()))


def test_with_tls_every_choice_matches_the_shipped_manifest(tmp_path: Path) -> None:
    tls = extender_tls(tmp_path)
    extra = scheduler_extra(18888, tls)
    shipped = _shipped()
    assert extra["profiles"] == shipped["profiles"]
    assert "percentageOfNodesToScore" not in shipped, "the default profile keeps the adaptive share"
    (ours,) = extra["extenders"]
    (theirs,) = shipped["extenders"]
    assert set(ours) == set(theirs)
    assert {k: v for k, v in ours.items() if k not in WHERE} == {k: v for k, v in theirs.items() if k not in WHERE}
    assert ours["urlPrefix"] == "https://127.0.0.1:18888"
    assert ours["tlsConfig"] == {
        "caFile": str(tls.ca_cert),
        "certFile": str(tls.client_cert),
        "keyFile": str(tls.client_key),
        "serverName": "localhost",
    }
    assert set(ours["tlsConfig"]) - {"serverName"} == set(theirs["tlsConfig"])


def test_without_tls_the_extender_is_called_over_plain_http_and_nothing_else_changes(tmp_path: Path) -> None:
    plain = scheduler_extra(18888)["extenders"][0]
    secure = scheduler_extra(18888, extender_tls(tmp_path))["extenders"][0]
    assert plain["urlPrefix"] == "http://127.0.0.1:18888"
    assert "enableHTTPS" not in plain and "tlsConfig" not in plain
    assert {k: v for k, v in secure.items() if k not in {"urlPrefix", "tlsConfig", "enableHTTPS"}} == {
        k: v for k, v in plain.items() if k != "urlPrefix"
    }


def test_only_the_profile_the_extenders_pods_are_moved_to_looks_at_every_node() -> None:
    profiles = {p["schedulerName"]: p for p in _shipped()["profiles"]}
    assert profiles == {
        "default-scheduler": {"schedulerName": "default-scheduler"},
        EVERY_NODE_PROFILE: {"schedulerName": EVERY_NODE_PROFILE, "percentageOfNodesToScore": 100},
    }


def test_without_the_policies_every_pod_looks_at_every_node() -> None:
    """Before 1.36 no policy moves the extender's pods to a profile of their own, and every pod is sent."""
    extra = scheduler_extra(18888, marked=False)
    assert extra["percentageOfNodesToScore"] == 100 and "profiles" not in extra
