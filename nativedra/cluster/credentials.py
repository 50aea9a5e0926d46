"""Who may talk to the local apiserver: a token per identity and a kubeconfig for each."""

from __future__ import annotations

import secrets
from pathlib import Path

import yaml

ADMIN_USER = "nativedra-admin"
SCHEDULER_USER = "system:kube-scheduler"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
_IDENTITIES = {
    ADMIN_USER: ("uid-admin", '"system:masters"'),
    SCHEDULER_USER: ("uid-scheduler", ""),
    CONTROLLER_MANAGER_USER: ("uid-kcm", ""),
}


class Credentials:
    """Fresh random tokens for the admin, the scheduler and the controller-manager."""

    def __init__(self) -> None:
        self.tokens = {user: secrets.token_hex(16) for user in _IDENTITIES}

    def write_token_file(self, path: Path) -> Path:
        """The apiserver's `--token-auth-file` (token,user,uid[,groups]); readable by the owner only."""
        lines = []
        for user, (uid, groups) in _IDENTITIES.items():
            lines.append(",".join(filter(None, (self.tokens[user], user, uid, groups))))
        path.write_text("\n".join(lines) + "\n")
        path.chmod(0o600)
        return path

    def write_kubeconfig(self, path: Path, user: str, server: str, ca_cert: Path) -> Path:
        return write_kubeconfig(path, server, ca_cert, user, {"token": self.tokens[user]})


def write_kubeconfig(path: Path, server: str, ca_cert: Path, user: str, credentials: dict[str, str]) -> Path:
    """A kubeconfig (owner-readable only) for `user` with `credentials` (a token, or a client cert and key)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "nativedra", "cluster": {"server": server, "certificate-authority": str(ca_cert)}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "nativedra", "context": {"cluster": "nativedra", "user": user}}],
        "current-context": "nativedra",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
