"""The command lines that launch a plugin or an extender are ones the `nativedra` parser accepts,
and a simulated node's directories all land under its root."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from nativedra.cli import build_parser
from nativedra.cluster.commands import NodeDirs, extender, plugin


def _parsed(command: list[str]) -> dict[str, Any]:
    assert command[:3] == [sys.executable, "-m", "nativedra.cli"], "the same Python environment runs it"
    return vars(build_parser().parse_args(command[3:]))


def test_a_plugin_command_puts_every_directory_of_the_node_under_its_root(tmp_path: Path) -> None:
    dirs = NodeDirs(tmp_path / "node-a")
    args = _parsed(plugin("node-a", tmp_path / "kubeconfig", "--backend", "simulated", dirs=dirs))
    assert (args["command"], args["node_name"], args["kubeconfig"]) == ("plugin", "node-a", tmp_path / "kubeconfig")
    assert args["backend"] == "simulated"
    placed = {key: args[key] for key in ("registry_dir", "plugin_dir", "cdi_dir", "dev_root")}
    assert placed == {
        "registry_dir": dirs.registry,
        "plugin_dir": dirs.plugins,
        "cdi_dir": dirs.cdi,
        "dev_root": dirs.dev,
    }
    assert all(path.parent == dirs.root for path in placed.values())
    assert len(set(placed.values())) == 4


def test_a_plugin_command_without_dirs_keeps_the_hosts_defaults(tmp_path: Path) -> None:
    defaults = vars(build_parser().parse_args(["plugin", "--node-name", "n"]))
    args = _parsed(plugin("n", tmp_path / "kubeconfig"))
    assert args["plugin_dir"] == defaults["plugin_dir"] and args["cdi_dir"] == defaults["cdi_dir"]


def test_an_extender_command_listens_on_loopback_at_the_given_port(tmp_path: Path) -> None:
    args = _parsed(extender(tmp_path / "kubeconfig", 18888, "--insecure-http"))
    assert (args["command"], args["port"], args["address"]) == ("extender", 18888, "127.0.0.1")
    assert args["kubeconfig"] == tmp_path / "kubeconfig" and args["insecure_http"] is True
