"""The supervisor's record of what it started lets `cluster down` stop processes one at a time."""

from __future__ import annotations

import sys
from pathlib import Path

from nativedra.cluster.processes import Supervisor, running, stop_recorded


def test_stop_recorded_can_stop_one_process_and_keep_the_record(tmp_path: Path) -> None:
    """`cluster down` stops the kubelet, then the containers, then containerd: one at a time."""
    (tmp_path / "logs").mkdir()
    supervisor = Supervisor(tmp_path, lambda: {}, tie_to_parent=True)
    first = supervisor.spawn("first", Path(sys.executable), ["-c", "import time; time.sleep(60)"])
    second = supervisor.spawn("second", Path(sys.executable), ["-c", "import time; time.sleep(60)"])
    try:
        assert stop_recorded(tmp_path, only="second") == ["second"]
        assert running(first) and not running(second)
        assert stop_recorded(tmp_path) == ["first"]
        assert not running(first)
    finally:
        supervisor.stop()
