"""The extender's ClusterRole lets it list and watch every kind its ClusterState watches (an
optional kind without the rule is silently treated as absent, native PodGroups for one), and no more."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from extender.informer import CUSTOM_RESOURCES
from extender.state import ClusterState

REPO = Path(__file__).resolve().parents[2]
BUILT_IN = {"pods": "", "nodes": ""}  # kinds listed through the typed core API


def _extender_rules() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl") or str(Path(sys.executable).parent / "kubectl")
    output = subprocess.run(
        [kubectl, "kustomize", str(REPO / "manifests" / "base")], capture_output=True, text=True, check=True
    ).stdout
    (role,) = [
        d
        for d in yaml.safe_load_all(output)
        if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "nativedra-extender"
    ]
    return list(role["rules"])


def test_every_watched_kind_can_be_listed_and_watched_and_nothing_else() -> None:
    custom = [CUSTOM_RESOURCES[kind] for kind in ClusterState.KINDS if kind in CUSTOM_RESOURCES]
    watched = {(resource.group, resource.plural) for resource in custom}
    watched |= {(group, plural) for plural, group in BUILT_IN.items()}
    granted = {
        (group, resource)
        for rule in _extender_rules()
        if {"list", "watch"} <= set(rule["verbs"])
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert watched - granted == set(), "watched kinds the extender may not list and watch"
    assert granted - watched == set(), "list/watch granted on kinds the extender does not watch"
