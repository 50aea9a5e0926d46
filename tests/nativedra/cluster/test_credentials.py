"""Each identity of the local control plane gets its own fresh token, in files only the owner can
read, and a kubeconfig that a Kubernetes client loads."""

from __future__ import annotations

import stat
from pathlib import Path

import yaml
from kubernetes import config

from nativedra.cluster.credentials import (
    ADMIN_USER,
    CONTROLLER_MANAGER_USER,
    SCHEDULER_USER,
    Credentials,
    write_kubeconfig,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_tokens_are_distinct_per_identity_and_per_cluster() -> None:
    first, second = Credentials(), Credentials()
    assert set(first.tokens) == {ADMIN_USER, SCHEDULER_USER, CONTROLLER_MANAGER_USER}
    assert len(set(first.tokens.values())) == 3
    assert not set(first.tokens.values()) & set(second.tokens.values())


def test_the_token_file_names_each_user_and_only_the_admin_is_a_master(tmp_path: Path) -> None:
    credentials = Credentials()
    path = credentials.write_token_file(tmp_path / "tokens.csv")
    assert _mode(path) == 0o600
    rows = {row.split(",")[1]: row.split(",") for row in path.read_text().splitlines()}
    assert set(rows) == set(credentials.tokens)
    for user, row in rows.items():
        assert row[0] == credentials.tokens[user]
        assert len(row) == (4 if user == ADMIN_USER else 3), "token,user,uid[,groups]"
    assert rows[ADMIN_USER][3] == '"system:masters"'
    assert len({row[2] for row in rows.values()}) == 3, "each identity has its own uid"


def test_a_kubeconfig_loads_into_a_client_with_the_users_token(tmp_path: Path) -> None:
    credentials = Credentials()
    (tmp_path / "ca.crt").write_text("not read until a connection is made")
    path = credentials.write_kubeconfig(
        tmp_path / "scheduler.kubeconfig", SCHEDULER_USER, "https://127.0.0.1:6443", tmp_path / "ca.crt"
    )
    assert _mode(path) == 0o600
    client = config.new_client_from_config(config_file=str(path))
    assert client.configuration.host == "https://127.0.0.1:6443"
    assert client.configuration.ssl_ca_cert == str(tmp_path / "ca.crt")
    header = client.configuration.auth_settings()["BearerToken"]
    assert (header["key"], header["value"]) == ("authorization", f"Bearer {credentials.tokens[SCHEDULER_USER]}")


def test_a_client_certificate_kubeconfig_carries_the_certificate_paths(tmp_path: Path) -> None:
    credentials = {"client-certificate": str(tmp_path / "c.crt"), "client-key": str(tmp_path / "c.key")}
    path = write_kubeconfig(
        tmp_path / "node.kubeconfig", "https://127.0.0.1:6443", tmp_path / "ca.crt", "node", credentials
    )
    document = yaml.safe_load(path.read_text())
    (context,) = document["contexts"]
    assert document["current-context"] == context["name"]
    (user,) = document["users"]
    assert context["context"]["user"] == user["name"] == "node" and user["user"] == credentials
