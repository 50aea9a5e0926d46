"""Command-line flags that fall back to `NATIVEDRA_<FLAG>` environment variables."""

from __future__ import annotations

import argparse
import os
from typing import Any


def env_name(flag: str) -> str:
    return "NATIVEDRA_" + flag.lstrip("-").upper().replace("-", "_")


def add_flag(parser: argparse.ArgumentParser, flag: str, **kwargs: Any) -> None:
    """Add `--flag` whose default comes from its environment variable when that is set."""
    variable = env_name(flag)
    if variable in os.environ:
        raw = os.environ[variable]
        converter = kwargs.get("type", str)
        kwargs["default"] = converter(raw)
        kwargs.pop("required", None)
    help_text = kwargs.get("help", "")
    kwargs["help"] = f"{help_text} [env {variable}]".strip()
    parser.add_argument(flag, **kwargs)
