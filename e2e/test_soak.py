"""A short soak in CI (`make soak` runs the 10-minute one): churn, SIGKILLs, then the invariants; on
the session's plane, its scheduler calling the soak's extender meanwhile."""

from __future__ import annotations

import os
from pathlib import Path

from nativedra.cluster import ControlPlane
from tools.soak import run_soak


def test_churn_and_kills_leave_no_stuck_pod_lost_spec_or_double_prepared_device(
    tmp_path: Path, control_plane: ControlPlane
) -> None:
    seconds = float(os.environ.get("NATIVEDRA_SOAK_SECONDS", "90"))
    report = run_soak(tmp_path, seconds, shared=control_plane)
    summary = f"{report}"
    assert len(report.kills) == 4, summary
    assert report.pods_created > 10 and report.gangs_created > 3 and report.claims_prepared > 10, summary
    assert report.stuck == [], summary
    assert report.lost_specs == [], summary
    assert report.double_prepared == [], summary
    assert report.rss_growth <= 0.10, summary
