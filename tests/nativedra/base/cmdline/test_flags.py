"""Every flag falls back to its NATIVEDRA_<FLAG> environment variable."""

from __future__ import annotations

import pytest

from nativedra.cli import build_parser


def test_flags_fall_back_to_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NATIVEDRA_NODE_NAME", "gpu-node-7")
    monkeypatch.setenv("NATIVEDRA_BACKEND", "simulated")
    args = build_parser().parse_args(["plugin"])
    assert args.node_name == "gpu-node-7"
    assert args.backend == "simulated"
